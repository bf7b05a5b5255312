"""Tool retrieval: a Flax BERT-family dual encoder (HF weights, no torch), contrastive fine-tuning,
an exact index, BFCL's single-turn tools as corpus and queries, ranking metrics.

    encoder.py     the NNX encoder, mean pooling, L2 normalisation
    hf_encoder.py  HF directories in and out; where all-MiniLM-L6-v2's package keeps it
    sentence.py    tokenizer + encoder -> embeddings; the named query errors
    index.py       vector search behind one protocol (exact: a jitted matmul + top-k)
    retriever.py   text-level search: dense, and BM25 (baseline, hard-negative miner)
    corpus.py      tool docs: ids, text, user corpus files
    bfcl_tools.py  BFCL single-turn corpus, queries and the seen/unseen-tool split
    loss.py        InfoNCE with in-batch and hard negatives
    train.py       the jitted contrastive training loop, resumable
    metrics.py     Recall@k, NDCG@k, MRR, bootstrap intervals, AUROC
    evaluate.py    systems x test sets -> a table

A library the environments call. Imports `learner` (the training loop's optimizer and
checkpoints), `models` and `report`; never `envs` or anything above.
"""
