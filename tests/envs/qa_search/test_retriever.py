"""Chunking, reciprocal-rank fusion, BM25 / dense / hybrid search and the retrieval metrics."""

import subprocess
import sys

import pytest

from seetjax.envs.qa_search.corpus import Passage
from seetjax.envs.qa_search.retriever import (
    Chunk,
    PassageRetriever,
    RetrieverSettings,
    chunk_passages,
    reciprocal_rank_fusion,
    retrieval_metrics,
)

CORPUS = [
    Passage("p0", "Alpha", "the red fox jumps over the lazy dog near the river bank"),
    Passage("p1", "Beta", "a blue whale swims in the cold ocean far from any river"),
    Passage("p2", "Gamma", "green parrots speak loudly in the tropical forest canopy"),
]


def test_chunks_are_overlapping_windows_that_cover_the_passage():
    passage = Passage("p", "T", " ".join(f"w{i}" for i in range(10)), "src")
    chunks = list(chunk_passages([passage], words=4, overlap=1))
    assert [c.text for c in chunks] == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert chunks[0] == Chunk("p#0", "p", "T", "w0 w1 w2 w3", "src")
    assert [c.id for c in chunk_passages([passage], words=10, overlap=0)] == ["p#0"]
    assert [c.text for c in chunk_passages([passage], words=6, overlap=2)] == [
        "w0 w1 w2 w3 w4 w5", "w4 w5 w6 w7 w8 w9"]


def test_reciprocal_rank_fusion_by_hand():
    fused = reciprocal_rank_fusion([[3, 1, 2], [1, 4]], rrf_k=1)
    # 3: 1/2; 1: 1/3 + 1/2; 2: 1/4; 4: 1/3
    assert [row for row, _ in fused] == [1, 3, 4, 2]
    assert [s for _, s in fused] == pytest.approx([5 / 6, 1 / 2, 1 / 3, 1 / 4])
    assert [row for row, _ in reciprocal_rank_fusion([[5, 6], [6, 5]])] == [5, 6]  # tie


def test_bm25_search_with_provenance_and_metrics_by_hand():
    retriever = PassageRetriever(CORPUS, RetrieverSettings(chunk_words=6, chunk_overlap=0))
    assert len(retriever) == 6
    hits = retriever.search("whale in the ocean", 3)
    assert hits[0].passage_id == "p1" and hits[0].chunk.title == "Beta" and hits[0].score > 0
    assert hits[0].chunk.id == "p1#0"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # "river" ends p0 and p1 (their second chunks); p1 also has "cold ocean", p0 neither.
    queries = ["parrots", "river", "cold ocean river"]
    assert [[h.passage_id for h in r] for r in retriever.search_many(queries, 2)] == [
        ["p2", "p0"], ["p0", "p1"], ["p1", "p0"]]
    gold = [{"p2"}, {"p0", "p1"}, {"p0"}]
    # Recall@2 = (1 + 1 + 1) / 3; MRR@2 = (1 + 1 + 1/2) / 3; at k = 1, Recall (1 + 1/2 + 0) / 3
    assert retrieval_metrics(retriever, queries, gold, 2) == pytest.approx(
        {"recall@2": 1.0, "mrr@2": 5 / 6})
    assert retrieval_metrics(retriever, queries, gold, 1) == pytest.approx(
        {"recall@1": 0.5, "mrr@1": 2 / 3})
    with pytest.raises(ValueError, match="without gold"):
        retrieval_metrics(retriever, ["river"], [set()], 2)


def test_world_hops_are_retrieved(world, world_retriever):
    tasks = world.questions("test", 30)
    queries = [h.question for t in tasks for h in t.hops]
    gold = [h.passage_ids for t in tasks for h in t.hops]
    got = retrieval_metrics(world_retriever, queries, gold, 5)
    assert got["recall@5"] == 1.0 and got["mrr@5"] > 0.9


def test_dense_and_hybrid_use_the_flax_encoder(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from seetjax.retrieval.sentence import EmptyQueryError, SentenceEncoder
    from tests.retrieval.conftest import save_random_encoder

    encoder = SentenceEncoder.from_dir(save_random_encoder(tmp_path_factory.mktemp("enc")))
    dense = PassageRetriever(CORPUS, RetrieverSettings(kind="dense"), encoder=encoder)
    hits = dense.search("Beta. a blue whale swims in the cold ocean far from any river", 3)
    assert hits[0].passage_id == "p1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    hybrid = PassageRetriever(CORPUS, RetrieverSettings(kind="hybrid", rrf_k=60), encoder=encoder)
    query = "green parrots"
    fused = hybrid.search(query, 3)
    lexical = [int(r) for r in hybrid._bm25.search([query], 3)[0][0]]
    semantic = [int(r) for r in hybrid._dense.search([query], 3)[0][0]]
    expected = reciprocal_rank_fusion([lexical, semantic], 60)
    assert [(h.chunk.id, h.score) for h in fused] == [
        (CORPUS[r].id + "#0", pytest.approx(s)) for r, s in expected]
    with pytest.raises(EmptyQueryError):
        hybrid.search("  ", 2)


def test_settings_name_the_field():
    with pytest.raises(ValueError, match="retriever='sparse'"):
        RetrieverSettings(kind="sparse")
    with pytest.raises(ValueError, match="chunk_overlap=5"):
        RetrieverSettings(chunk_words=5, chunk_overlap=5)
    with pytest.raises(ValueError, match="chunk_words=0"):
        RetrieverSettings(chunk_words=0)


def test_importing_the_environment_imports_neither_bm25s_nor_jax():
    # bm25s runs JAX at import, which must not happen before jax.distributed.initialize.
    code = ("import sys; import seetjax.envs.qa_search.env, seetjax.envs.qa_search.oracle, "
            "seetjax.envs.qa_search.web_search; "
            "print(sorted(m for m in ('bm25s', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
