"""QASearchConfig: every bad field named with its value."""

import pytest

from seetjax.envs.qa_search.config import QASearchConfig


@pytest.mark.parametrize("field, value, message", [
    ("search_budget", 0, "search_budget=0"),
    ("default_k", 0, "default_k=0"),
    ("max_k", 3, "max_k=3: must be an integer >= default_k=5"),
    ("retrieval_mask_ratio", 1.0, "retrieval_mask_ratio=1.0"),
    ("retrieval_mask_ratio", -0.1, "retrieval_mask_ratio=-0.1"),
    ("search_cost", -1.0, "search_cost=-1.0"),
    ("timeout_penalty", None, "timeout_penalty=None"),
    ("retriever", "tfidf", "retriever='tfidf'"),
    ("chunk_overlap", 100, "chunk_overlap=100"),
    ("prompt_style", "bfcl", "prompt_style='bfcl'"),
    ("max_steps", True, "max_steps=True"),
    ("oracle_spaced_answer", 1, "oracle_spaced_answer=1"),
])
def test_config_errors_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        QASearchConfig(**{field: value})
