"""Each token's text and exact bytes, as logprobs report them."""

from seetjax.serving.token_text import TokenText


def test_token_bytes_are_exact_for_pieces_of_characters(tokenizer):
    text = TokenText(tokenizer)
    ids = tokenizer.encode("naïve café ✓")
    assert bytes(b for i in ids for b in text.bytes(i)).decode() == "naïve café ✓"
    entries = text.logprobs(ids[:2], [-0.5, -1.0], [[(ids[0], -0.5)], []])
    assert entries[0]["top_logprobs"][0]["token"] == entries[0]["token"]
    assert entries[1]["logprob"] == -1.0 and entries[1]["top_logprobs"] == []
