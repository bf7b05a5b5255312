"""The BFCL single-turn tool corpus and its split (read from the installed bfcl-eval)."""

from seetjax.retrieval.bfcl_tools import NO_GOLD, load_bfcl_tools, split_queries


def test_corpus_and_queries():
    data = load_bfcl_tools()
    assert len(data.docs) == 3258 and len({d.name for d in data.docs}) == 1853
    with_gold = [q for q in data.queries if q.gold]
    assert len(with_gold) == 2501
    assert len(data.queries) - len(with_gold) == 1124
    assert all(q.category in NO_GOLD for q in data.queries if not q.gold)
    ids = {d.id for d in data.docs}
    assert all(g in ids for q in with_gold for g in q.gold) and all(q.text for q in data.queries)


def test_split_is_deterministic_and_keeps_unseen_tools_out_of_training():
    data = load_bfcl_tools()
    split = split_queries(data)
    assert split == split_queries(data)
    name = {d.id: d.name for d in data.docs}
    trained = {name[g] for q in split.train for g in q.gold}
    assert all(name[g] in trained for q in split.seen_test for g in q.gold)
    assert all(any(name[g] not in trained for g in q.gold) for q in split.unseen_test)
    assert not any(g in split.held_out_docs for q in split.train for g in q.gold)
    assert not {name[d] for d in split.held_out_docs} & trained
    texts = [{q.text for q in part} for part in (split.train, split.seen_test, split.unseen_test)]
    assert not texts[0] & texts[1] and not texts[0] & texts[2]
    assert all(not q.gold for q in split.no_tool_test)
    # Sizes at the default fractions (a change here changes every reported number).
    assert (len(split.train), len(split.seen_test), len(split.unseen_test),
            len(split.no_tool_test)) == (1603, 270, 628, 254)
