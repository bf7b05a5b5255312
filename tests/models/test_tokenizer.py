"""Tokenizers: the offline BPE + chat template, and loading HF tokenizer directories."""

import copy
import json
import shutil

import pytest
import tokenizers
import transformers

from seetjax.defaults.embedded import bfcl_corpus
from seetjax.models.tokenizer import Tokenizer, train_bpe_tokenizer

TOOLS = [{"type": "function", "function": {
    "name": "ls", "description": "List files.",
    "parameters": {"type": "dict", "properties": {"a": {"type": "boolean"}}, "required": []}}}]
CONVERSATION = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "List everything, hidden files too."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "ls", "arguments": {"a": True}}},
        {"name": "cd", "arguments": '{"folder": "docs"}'}]},
    {"role": "tool", "content": '{"current_directory_content": ["a.txt"]}'},
    {"role": "assistant", "content": "There is one file, a.txt."},
]


def test_chat_template_renders_every_role(tokenizer):
    text = tokenizer.chat_text(CONVERSATION, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a careful agent.\n\n")
    assert '\n{"name": "ls", "description": "List files."' in text
    assert ('<|im_start|>assistant\n<tool_call>{"name": "ls", "arguments": {"a": true}}</tool_call>'
            '\n<tool_call>{"name": "cd", "arguments": {"folder": "docs"}}</tool_call><|im_end|>\n'
            in text)
    assert '<|im_start|>tool\n{"current_directory_content": ["a.txt"]}<|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\nThere is one file, a.txt.<|im_end|>\n")
    assert text.count("<|im_start|>") == 5  # the system message is rendered once


def test_chat_template_is_prefix_stable(tokenizer):
    """Token in, token out: a prompt with the generation header is a prefix of the conversation
    that continues it, in text and in ids."""
    for k, message in enumerate(CONVERSATION):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.chat_ids(CONVERSATION[:k], TOOLS, add_generation_prompt=True)
        full = tokenizer.chat_ids(CONVERSATION[:k + 1], TOOLS)
        assert full[:len(prompt)] == prompt
        assert full[-2:] == tokenizer.encode("<|im_end|>\n")


def test_no_system_no_tools(tokenizer):
    text = tokenizer.chat_text([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_special_and_stop_tokens(tokenizer):
    im_end = tokenizer.encode("<|im_end|>")
    assert len(im_end) == 1 and im_end[0] in tokenizer.stop_ids
    assert len(tokenizer.encode("<tool_call>")) == 1
    ids = tokenizer.encode('<tool_call>{"name": "ls"}</tool_call><|im_end|>')
    kept = tokenizer.decode(ids, skip_special_tokens=True)
    assert kept == '<tool_call>{"name": "ls"}</tool_call>'
    assert tokenizer.decode([tokenizer.pad_id]) == "<|endoftext|>"


def test_saved_directory_encodes_the_same_in_transformers(embedded_dir):
    """AutoTokenizer rebuilds a qwen2 directory's pipeline; ours was trained with the same one."""
    auto = transformers.AutoTokenizer.from_pretrained(embedded_dir)
    ours = Tokenizer.from_pretrained(embedded_dir)
    for text in bfcl_corpus()[::25] + ["  spaces\n\n\ttabs 12345 ünïcode 日本 <|im_start|>x"]:
        assert auto.encode(text, add_special_tokens=False) == ours.encode(text)
        assert ours.decode(ours.encode(text)) == text


@pytest.mark.parametrize("declared", ["TokenizersBackend", "PreTrainedTokenizerFast",
                                      "Qwen2TokenizerFast", None])
def test_a_qwen2_directory_loads_with_the_class_auto_tokenizer_picks(embedded_dir, tmp_path,
                                                                     declared):
    """We name Qwen2Tokenizer for a qwen2 directory instead of asking AutoTokenizer (whose module
    imports torch); AutoTokenizer picks that class too, whatever tokenizer_config.json declares."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(embedded_dir / name, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class", None)
    if declared is not None:
        config["tokenizer_class"] = declared
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    ours = Tokenizer.from_pretrained(tmp_path).hf
    assert type(ours) is type(transformers.AutoTokenizer.from_pretrained(tmp_path))
    assert type(ours) is transformers.Qwen2Tokenizer


def test_bpe_training_is_deterministic():
    texts = bfcl_corpus()[:1500]
    a, b = train_bpe_tokenizer(texts, 600), train_bpe_tokenizer(texts, 600)
    assert a.hf.backend_tokenizer.to_str() == b.hf.backend_tokenizer.to_str()


def test_a_tokenizer_without_chat_template_is_refused(tmp_path):
    raw = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="a")
    with pytest.raises(ValueError, match="chat template"):
        Tokenizer(hf)


def test_encode_messages_masks_exactly_the_replies(tokenizer):
    chat = tokenizer.encode_messages(CONVERSATION, TOOLS)
    assert chat.ids == tokenizer.chat_ids(CONVERSATION, TOOLS)
    assert chat.message_ends[-1] == len(chat.ids) and len(chat.message_ends) == len(CONVERSATION)
    trained = [i for i, m in zip(chat.ids, chat.loss_mask) if m]
    expected = tokenizer.encode(
        '<tool_call>{"name": "ls", "arguments": {"a": true}}</tool_call>\n<tool_call>{"name": '
        '"cd", "arguments": {"folder": "docs"}}</tool_call><|im_end|>'
        'There is one file, a.txt.<|im_end|>')
    assert trained == expected
    # the mask is 0 on the generation header and on the template's newline after <|im_end|>
    header = tokenizer.encode("<|im_start|>assistant\n")
    first_trained = chat.loss_mask.index(1)
    assert chat.ids[first_trained - len(header):first_trained] == header
    assert chat.loss_mask[-1] == 0 and chat.ids[-1] == tokenizer.encode("\n")[0]


def test_encode_messages_refuses_a_template_that_rewrites_history(tokenizer):
    # A template that renders only the last user message changes earlier text as turns are added.
    template = ("{% for m in messages %}{% if loop.last or m.role != 'user' %}"
                "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    hf = copy.deepcopy(tokenizer.hf)
    hf.chat_template = template
    with pytest.raises(ValueError, match="not prefix-stable at message 1"):
        Tokenizer(hf).encode_messages([{"role": "user", "content": "a"},
                                       {"role": "assistant", "content": "b"},
                                       {"role": "user", "content": "c"}])
