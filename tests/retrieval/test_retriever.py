"""BM25 and dense retrievers over a few tools; bad queries named."""

import numpy as np
import pytest

from seetjax.retrieval.corpus import tool_doc
from seetjax.retrieval.index import HnswIndex
from seetjax.retrieval.retriever import BM25Retriever, DenseRetriever
from seetjax.retrieval.sentence import EmptyQueryError, QueryTooLongError

DOCS = [tool_doc({"name": name, "description": description}) for name, description in [
    ("get_weather", "Weather forecast for a city on a given day."),
    ("send_email", "Send an email message to a recipient."),
    ("triangle_area", "Area of a triangle from its three sides."),
    ("book_flight", "Book a flight between two airports."),
    ("convert_currency", "Convert an amount of money between currencies.")]]


@pytest.fixture(scope="module")
def dense(minilm):
    return DenseRetriever(minilm, DOCS)


def test_dense_retriever_finds_the_tool(dense):
    rows, scores = dense.search(["Will it rain in Paris tomorrow?", "mail my boss"], 2)
    assert [DOCS[r].name for r in rows[:, 0]] == ["get_weather", "send_email"]
    assert np.all(scores[:, 0] >= scores[:, 1])


def test_an_approximate_index_gives_the_exact_ranking_of_a_few_tools(dense, minilm):
    queries = ["Will it rain in Paris tomorrow?", "mail my boss", "fly to Rome"]
    rows, scores = DenseRetriever(minilm, DOCS, index=HnswIndex).search(queries, 3)
    exact_rows, exact_scores = dense.search(queries, 3)
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-6)


def test_bad_queries_are_named(dense, minilm):
    with pytest.raises(EmptyQueryError, match="query 1 is empty"):
        dense.search(["weather", "  "], 1)
    long_query = "weather " * 300
    with pytest.raises(QueryTooLongError, match=f"at most {minilm.max_length}"):
        dense.search([long_query], 1)
    lenient = DenseRetriever(minilm, DOCS[:2], strict=False)  # cuts, as sentence-transformers
    assert DOCS[lenient.search([long_query], 1)[0][0, 0]].name == "get_weather"


def test_bm25_ranks_and_mines_negatives_that_are_not_gold():
    bm25 = BM25Retriever(DOCS)
    rows, _ = bm25.search(["triangle sides area"], 3)
    assert DOCS[rows[0, 0]].name == "triangle_area"
    gold = {DOCS[2].id}
    negatives = bm25.hard_negatives(["area of a triangle, or send an email"], [gold], 2,
                                    excluded={DOCS[1].id})
    assert DOCS[2].id not in {DOCS[r].id for r in negatives[0]}
    assert DOCS[1].id not in {DOCS[r].id for r in negatives[0]}
    with pytest.raises(EmptyQueryError):
        bm25.search([""], 1)
    assert not bm25.scores(["the of and"]).any()  # stopwords only: no terms, scores 0
