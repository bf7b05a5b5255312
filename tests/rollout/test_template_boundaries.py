"""Chat-template boundaries (issue 43, item 4; verl #6921 dropped a newline at every assistant ->
tool -> assistant boundary). For every template we support, the embedded one and the published
Qwen2.5-Instruct and Llama-3.1-Instruct templates (`templates/`), the ids a rollout builds turn
by turn equal the template's tokenization of the finished conversation at every boundary:
parallel calls, a tool error, an empty tool result, a second user turn, a reply cut at its cap.

The tokenizers are the embedded BPE with each family's special tokens added, so the template's
text and ours tokenize alike; the replies are what a model that learned the template writes (its
rendering of the assistant message, up to and including the stop token).
"""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import Conversation
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.seet.config import PLAIN_STAGE
from tests.rollout.scripted import ScriptedPolicy

TEMPLATES = Path(__file__).with_name("templates")
LLAMA_SPECIALS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                  "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>",
                                                "<|eom_id|>", "<|python_tag|>"]}
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} a folder.",
    "parameters": {"type": "object", "properties": {"folder": {"type": "string"}},
                   "required": []}}} for name in ("ls", "cd")]
OPENING = [{"role": "system", "content": "You are a careful agent."},
           {"role": "user", "content": "List docs, then enter it."}]


def published_template(name: str) -> str:
    """A template fixture's text less its header line (which names its source and license)."""
    header, text = (TEMPLATES / f"{name}.jinja").read_text().split("\n", 1)
    assert header.startswith("{#-") and "tokenizer_config.json" in header
    return text


@dataclasses.dataclass(frozen=True)
class Family:
    tokenizer: Tokenizer
    stop: str  # the token the template closes a reply with
    after_stop: str  # what the template writes after it
    one_call_per_reply: bool  # Llama 3.1's template refuses parallel tool_calls


def make_family(name: str, embedded: Tokenizer) -> Family:
    if name == "embedded":
        return Family(embedded, "<|im_end|>", "\n", False)
    hf = copy.deepcopy(embedded.hf)
    llama = name.startswith("llama")
    if llama:
        hf.add_special_tokens(LLAMA_SPECIALS)
    hf.chat_template = published_template(name)
    return (Family(Tokenizer(hf), "<|eot_id|>", "", True) if llama
            else Family(Tokenizer(hf), "<|im_end|>", "\n", False))


@pytest.fixture(scope="module", params=["embedded", "qwen2_5_instruct", "llama3_1_instruct"])
def family(request, tokenizer):
    return make_family(request.param, tokenizer)


def calls(*names_and_folders):
    return parallel([(n, {"folder": f}) for n, f in names_and_folders], one_per_message=False)


def parallel(named_arguments, one_per_message):
    """An assistant message calling each (name, arguments): as tool_calls, or, where the template
    takes one call per message (Llama 3.1), as the text of a JSON list of calls (our `auto` call
    parser reads it)."""
    if one_per_message:
        return {"role": "assistant", "content": json.dumps(
            [{"name": n, "parameters": a} for n, a in named_arguments])}
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": n, "arguments": a}} for n, a in named_arguments]}


def sampled(family, history, message):
    """The reply ids a model that learned the template samples for `message` after `history`."""
    tok = family.tokenizer
    prompt = tok.chat_text(history, TOOLS, add_generation_prompt=True)
    text = tok.chat_text([*history, message], TOOLS)
    assert text.startswith(prompt) and text.endswith(family.stop + family.after_stop)
    return tok.encode(text[len(prompt):len(text) - len(family.after_stop)])


def test_incremental_ids_equal_the_template_over_a_whole_episode(family):
    tok = family.tokenizer
    conversation = Conversation(tok, OPENING, TOOLS)
    context = list(conversation.segments[0].ids)  # what the sampler has conditioned on
    messages = [dict(m) for m in OPENING]  # the finished conversation, as the template takes it
    cut = calls(("cd", "archive"))
    steps = [
        (parallel([("ls", {"folder": "docs"}), ("cd", {"folder": "docs"})],
                  family.one_call_per_reply),
         [{"role": "tool", "name": "ls", "content": '["a.txt"]'},
          {"role": "tool", "name": "cd", "content": "Error: no docs"}]),
        (calls(("cd", "docs")), [{"role": "tool", "name": "cd", "content": ""}]),
        ({"role": "assistant", "content": "Entered docs; it holds a.txt."},
         [{"role": "user", "content": "Now go to the archive."}]),
        (cut, [{"role": "tool", "content": "Error: the reply was cut off."}]),
        ({"role": "assistant", "content": "I could not."}, None),
    ]
    for message, observations in steps:
        ids = sampled(family, messages, message)
        if message is cut:
            # Cut at the cap: the sampled ids stop mid-call; the rollout closes the reply with
            # the template's stop token, so the boundary is the template's rendering of the cut
            # text as the reply's content.
            ids = ids[:len(ids) // 2]
            assert tok.encode(tok.decode(ids)) == ids  # a canonical prefix (see docs/rollout.md)
            message = {"role": "assistant", "content": tok.decode(ids)}
            conversation.add_reply(ids, [0.0] * len(ids), stopped=False)
        else:
            conversation.add_reply(ids, [0.0] * len(ids), stopped=True)
        context += ids
        messages.append(message)
        if observations is None:
            break
        context += conversation.add_observations(observations)
        messages += observations
        expected = tok.chat_ids(messages, TOOLS, add_generation_prompt=True)
        assert conversation.training_ids() == expected
        assert context == expected
        assert tok.decode(context) == tok.chat_text(messages, TOOLS, add_generation_prompt=True)
    whole = tok.chat_ids(messages, TOOLS)
    assert whole == conversation.training_ids() + tok.encode(family.after_stop)
    # The SFT path encodes the same conversation to the same ids, reply by reply.
    assert tok.encode_messages(messages, TOOLS).ids == whole


class RecordingPolicy(ScriptedPolicy):
    """A scripted policy that keeps each row's context: its prompt, then every reply it sampled
    and every chunk the rollout extended it with."""

    def start(self, prompts):
        self.contexts = [list(p) for p in prompts]

    def generate(self, rows, chunks, max_new_tokens):
        out = super().generate(rows, chunks, max_new_tokens)
        for row, chunk, completion in zip(rows, chunks, out):
            self.contexts[row] += list(chunk) + completion.tokens
        return out


def reply_text(family, message):
    """The text of `message` as the template renders a reply (without its stop token)."""
    ids = sampled(family, [{"role": "user", "content": "q"}], message)
    return family.tokenizer.decode(ids[:-1])


def test_a_bfcl_rollout_with_native_tools_is_the_template_rendering(family, task):
    """Through `Rollout.play` on BFCL with native tool docs: parallel calls, a failing call,
    turn ends and the next user turns; the training row and the sampler's context both equal
    the template's ids of the episode's messages."""
    first = [("cd", {"folder": "document"}), ("mkdir", {"dir_name": "temp"})]
    failing = [("mv", {"source": "missing.pdf", "destination": "temp"})]
    script = [reply_text(family, parallel(first, family.one_call_per_reply)),
              reply_text(family, parallel(failing, one_per_message=False)), "Done."]
    rollout = Rollout(family.tokenizer, RolloutConfig(
        group_size=1, env=BfclEnvConfig(prompt_style="native", call_format="auto"),
        limits=EpisodeLimits(max_episode_tokens=65536)))  # Llama's indented docs: 22k tokens
    [episode] = rollout.episodes([task], PLAIN_STAGE, progress=0.0, seed=0)
    policy = RecordingPolicy(family.tokenizer, lambda row: script.pop(0) if script else "Done.")
    rollout.play([episode], policy)
    steps = episode.env.trace().steps
    assert [len(s.calls) for s in steps[:2]] == [2, 1] and not steps[1].results[0].ok
    conversation = episode.conversation
    tok = family.tokenizer
    whole = tok.chat_ids(conversation.messages, conversation.tools)
    assert whole == conversation.training_ids() + tok.encode(family.after_stop)
    assert policy.contexts[0] == conversation.training_ids()
    assert sum(m["role"] == "user" for m in conversation.messages) == task.num_turns


def test_a_llama_reply_ended_by_eom_keeps_it(tokenizer):
    """Llama 3.1 may end a tool call with <|eom_id|> (its template's system prompt says
    "Environment: ipython"); the template re-renders every reply with <|eot_id|>. The row keeps
    the token the policy sampled; the boundary after it is the template's."""
    family = make_family("llama3_1_instruct", tokenizer)
    tok = family.tokenizer
    conversation = Conversation(tok, OPENING, TOOLS)
    message, tool = calls(("cd", "docs")), {"role": "tool", "content": "ok"}
    ids = sampled(family, OPENING, message)
    ids[-1] = tok.encode("<|eom_id|>")[0]
    conversation.add_reply(ids, [0.0] * len(ids), stopped=True)
    conversation.add_observations([tool])
    expected = tok.chat_ids([*OPENING, message, tool], TOOLS, add_generation_prompt=True)
    at = len(conversation.segments[0].ids) + len(ids) - 1
    assert expected[at] == tok.encode("<|eot_id|>")[0]
    assert conversation.training_ids() == expected[:at] + ids[-1:] + expected[at + 1:]


def test_a_template_that_rewrites_the_last_reply_is_refused_at_the_boundary(tokenizer):
    """A template that renders the latest message differently (as templates that drop earlier
    turns' reasoning do) is not prefix-stable: the rollout says so instead of appending ids
    that disagree with the template."""
    hf = copy.deepcopy(tokenizer.hf)
    hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                        "{% if loop.last %} (latest){% endif %}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = Tokenizer(hf)
    conversation = Conversation(tok, [{"role": "user", "content": "hi"}])
    reply = tok.encode("hello<|im_end|>")
    conversation.add_reply(reply, [0.0] * len(reply), stopped=True)
    with pytest.raises(ValueError, match="not prefix-stable at message 2"):
        conversation.add_observations([{"role": "tool", "content": "x"}])
