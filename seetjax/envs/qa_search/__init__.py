"""Multi-hop question answering with a search tool (issue 17, part 2), offline.

    corpus.py      passages, multi-hop tasks (per-hop sub-questions, answers, gold passages),
                   JSONL corpus files (malformed lines skipped, counted, logged)
    world.py       the seeded synthetic world: entities, encyclopedia passages, 1- to 4-hop
                   questions, train/test split by entity, lazy to millions of passages
    web_search.py  BFCL v4 web_search's questions, with a corpus built from their hops
    retriever.py   chunking, BM25 / dense / hybrid (reciprocal-rank fusion), Recall@k and MRR
    masking.py     retrieval_mask_ratio: exactly floor(r * n) retrieved words masked, seeded
    reward.py      exact match, token F1, format and search cost, each part kept
    config.py      QASearchConfig: episode, reward and retriever settings, checked
    env.py         QASearchEnv, the ToolEnv with search(query, k) and answer(text)
    oracle.py      the oracle policy: gold hop queries, then the last hop's answer
    run.py         in run configs (env.name=qa_search): the section with its corpus, one
                   retriever per process, the task loader and the task-side checks

Imports `envs` (base, BFCL's data for web_search), `retrieval` and `tools`.
"""
