"""Formatting dialogs: the tokenizer's ids and mask, dropping and truncating at message bounds."""

import numpy as np
import pytest

from seetjax.data.dialogs import Dialog, lexical_diversity
from seetjax.data.formatter import format_dialog, format_dialogs


def chat(id="d", turns=3, **metadata):
    messages = [{"role": "system", "content": "You are a helpful agent."}]
    for t in range(turns):
        messages += [{"role": "user", "content": f"Please list folder number {t}."},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"function": {"name": "ls", "arguments": {"folder": f"f{t}"}}}]},
                     {"role": "tool", "content": f"[\"a{t}.txt\", \"b{t}.txt\"]"},
                     {"role": "assistant", "content": f"Folder {t} holds two files."}]
    return Dialog(id, messages, metadata=metadata)


def test_ids_and_mask_are_the_tokenizers(tokenizer):
    d = chat(loss=2.5)
    example = format_dialog(d, tokenizer)
    encoded = tokenizer.encode_messages(d.messages, d.tools)
    np.testing.assert_array_equal(example.tokens, encoded.ids)
    np.testing.assert_array_equal(example.loss_mask, encoded.loss_mask)
    assert example.tokens.dtype == np.int32 and example.loss_mask.dtype == np.float32
    assert example.loss == 2.5 and not example.truncated
    assert example.task_type == d.task_type == "tool_selection"
    assert example.lexical_diversity == lexical_diversity(d)
    trained = tokenizer.decode(example.tokens[example.loss_mask == 1])
    assert "Folder 0 holds two files.<|im_end|>" in trained
    assert "Please list" not in trained and "a0.txt" not in trained  # user, tool: not trained


def test_final_reply_weight_falls_on_the_last_reply_only(tokenizer):
    d = chat(turns=2)
    plain = format_dialog(d, tokenizer)
    weighted = format_dialog(d, tokenizer, final_reply_weight=4.0)
    last = tokenizer.encode_messages(d.messages).message_ends[-2]  # the last reply starts after
    np.testing.assert_array_equal(weighted.loss_mask[:last], plain.loss_mask[:last])
    np.testing.assert_array_equal(weighted.loss_mask[last:], 4.0 * plain.loss_mask[last:])
    assert tokenizer.decode(weighted.tokens[weighted.loss_mask == 4.0]) == \
        "Folder 1 holds two files.<|im_end|>"
    assert weighted.num_trained == plain.num_trained  # a count of tokens, not of weight
    # a truncated dialog's last kept reply is not its final one: nothing is weighted
    ends = tokenizer.encode_messages(d.messages).message_ends
    cut = format_dialog(d, tokenizer, max_len=ends[-2], truncate=True, final_reply_weight=4.0)
    assert cut.truncated and set(np.unique(cut.loss_mask)) == {0.0, 1.0}


def test_long_dialogs_are_dropped_or_cut_at_a_message_boundary(tokenizer):
    d = chat(turns=4)
    full = format_dialog(d, tokenizer)
    limit = full.num_tokens - 5
    assert format_dialog(d, tokenizer, max_len=limit) == f"{full.num_tokens} tokens > max_len {limit}"
    cut = format_dialog(d, tokenizer, max_len=limit, truncate=True)
    assert cut.truncated and cut.num_tokens <= limit
    # the cut is the encoding of the first k messages exactly
    ends = tokenizer.encode_messages(d.messages).message_ends
    k = ends.index(cut.num_tokens) + 1
    np.testing.assert_array_equal(cut.tokens, tokenizer.encode_messages(d.messages[:k]).ids)
    np.testing.assert_array_equal(cut.tokens, full.tokens[:cut.num_tokens])
    assert format_dialog(d, tokenizer, max_len=ends[1], truncate=True) == \
        f"no assistant token within the first {ends[1]} tokens"


def test_format_dialogs_reports_what_it_leaves_out(tokenizer):
    dialogs = [chat("short", turns=1), chat("long", turns=6), chat("cut", turns=5)]
    limit = format_dialog(dialogs[0], tokenizer).num_tokens + 60
    examples, report = format_dialogs(dialogs[:2], tokenizer, max_len=limit)
    assert [e.id for e in examples] == ["short"] and list(report.dropped) == ["long"]
    assert "1 dialogs formatted (0 truncated), 1 left out" in str(report)
    examples, report = format_dialogs(dialogs, tokenizer, max_len=limit, truncate=True)
    assert [e.id for e in examples] == ["short", "long", "cut"]
    assert report.truncated == ("long", "cut") and not report.dropped
    with pytest.raises(ValueError, match="appears twice"):
        format_dialogs([dialogs[0], dialogs[0]], tokenizer)
