"""BFCL evaluation through an OpenAI-compatible endpoint (our own server, over HTTP): the same
episodes and verdicts as the in-process greedy evaluation of the same model; retries on 429;
`launch/evaluate.py --endpoint`."""

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import pytest

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.splits import load_split
from seetjax.envs.generated import Difficulty, generate_tasks
from seetjax.eval.evaluate import EVAL_STAGE, report
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import SamplingParams
from seetjax.serving.client import EndpointConfig, EndpointPolicy, reply_text
from seetjax.serving.requests import GenerationParams
from tests.serving.servinglib import MODEL_NAME

COMPACT = BfclEnvConfig(prompt_style="compact")  # the environment section of these rollouts

ROOT = Path(__file__).resolve().parents[2]
# Within the test server's context: a reply never asks past it.
LIMITS = EpisodeLimits(max_reply_tokens=12, max_turn_tokens=48, max_episode_tokens=2400)


def assistant_texts(episode):
    return [m["content"] for m in episode.env.history if m["role"] == "assistant"]


def small_tasks(style):
    """One BFCL test task (compact prompts are short), or for native tool docs (3,400 tokens and
    up on BFCL's tasks) one generated BFCL-format task of one small API class."""
    if style != "native":
        return load_split("test", ["base"], 1)
    return generate_tasks(1, seed=0, split="test", category="base", classes=("MessageAPI",),
                          difficulty=Difficulty(turns=(2, 2), classes=1, calls_per_turn=1,
                                                actions_per_turn=1))


@pytest.mark.parametrize("style", ["compact", "native"])
def test_endpoint_episodes_match_in_process_greedy(server, engine, tokenizer, style):
    tasks = small_tasks(style)
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, limits=LIMITS,
                                               env=BfclEnvConfig(prompt_style=style)))
    local = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    rollout.play(local, SamplerPolicy(engine.sampler, engine.params, SamplingParams(0.0),
                                      tokenizer.stop_ids, jax.random.key(0)))
    policy = EndpointPolicy(EndpointConfig(url=server.url, model=MODEL_NAME), tokenizer)
    remote = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    policy.play(remote)
    # Reply for reply the same conversation: the server's greedy replies are the sampler's as
    # long as both saw the same tokens. An endpoint speaks text: a reply is encoded again on
    # our side, and a cut-off reply's text can encode to other ids than those sampled (seen on
    # an AVX2 machine); from there on the contexts differ, and nothing is claimed.
    drifted = False
    for mine, through_http in zip(local, remote):
        assert through_http.error is None
        texts, sampled, encoded = (assistant_texts(mine), replies(mine),
                                   replies(through_http))
        same = next((i for i, (a, b) in enumerate(zip(sampled, encoded)) if a != b), None)
        upto = len(texts) if same is None else same + 1
        assert assistant_texts(through_http)[:upto] == texts[:upto]  # the drifting one too
        if same is None:
            assert len(assistant_texts(through_http)) == len(texts)
            assert [t.passed for t in through_http.turns] == [t.passed for t in mine.turns]
        else:  # the same text, tokenised otherwise
            assert tokenizer.decode(encoded[same]) == tokenizer.decode(sampled[same])
        drifted |= same is not None
    if not drifted:
        ours, theirs = report("test", local), report("test", remote)
        assert [(e.task_id, e.valid, e.error_type) for e in theirs.entries] == [
            (e.task_id, e.valid, e.error_type) for e in ours.entries]
        assert theirs.bfcl.accuracy == ours.bfcl.accuracy
    assert policy.requests == sum(len(assistant_texts(e)) for e in remote) > len(tasks)


def replies(episode) -> list[list[int]]:
    """The ids of `episode`'s replies as its conversation holds them."""
    return [s.ids for s in episode.conversation.segments if s.kind == "reply"]


def test_native_history_goes_out_as_tool_calls_with_ids(tokenizer):
    policy = EndpointPolicy(EndpointConfig(url="http://127.0.0.1:9/v1", model="m"), tokenizer)
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": 'ok\n<tool_call>{"name": "cd", "arguments": '
                '{"folder": "docs"}}</tool_call>\n<tool_call>{"name": "ls", "arguments": {}}'
                '</tool_call>'},
               {"role": "tool", "name": "cd", "content": "None"},
               {"role": "tool", "name": "ls", "content": "[]"},
               {"role": "assistant", "content": "[broken"},
               {"role": "tool", "content": "Error: could not parse"}]
    out = policy.messages(history, native=True, call_format="hermes")
    calls = out[1]["tool_calls"]
    assert out[1]["content"] == "ok"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("cd", {"folder": "docs"}), ("ls", {})]
    assert [m.get("tool_call_id") for m in out[2:4]] == [calls[0]["id"], calls[1]["id"]]
    # A message without calls stays text; feedback on it, answering no call, is said as the user.
    assert out[4] == {"role": "assistant", "content": "[broken"}
    assert out[5] == {"role": "user", "content": "Error: could not parse"}
    prompt_style = policy.messages(history[2:4], native=False, call_format="python")
    assert prompt_style[0] == {"role": "tool", "name": "cd", "content": "None"}


def test_reply_text_is_what_the_environment_reads():
    class Call:
        def __init__(self, name, arguments):
            self.function = type("F", (), {"name": name, "arguments": arguments})

    assert reply_text("hi", []) == "hi"
    assert reply_text(None, [Call("cd", '{"folder": "a"}'), Call("ls", "")]) == (
        '<tool_call>{"name": "cd", "arguments": {"folder": "a"}}</tool_call>\n'
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>')


def test_requests_are_retried_after_429(server, engine, tokenizer):
    """The queue is full when the policy asks; the openai client backs off (Retry-After) and
    gets its reply once the queue drains."""
    tasks = load_split("test", ["base"], 1)
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1, limits=LIMITS))
    (episode,) = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    filler = GenerationParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    prompt = tokenizer.chat_ids([{"role": "user", "content": "fill"}], add_generation_prompt=True)
    handles = [engine.submit(prompt, filler) for _ in range(engine.max_batch)]
    while engine.active_rows < engine.max_batch:
        threading.Event().wait(0.01)
    handles += [engine.submit(prompt, filler) for _ in range(engine.max_queue)]
    rejected = engine.stats.rejected

    def drain_after_a_refusal():  # not on a timer: a loaded machine may ask after it fired
        deadline = time.monotonic() + 60
        while engine.stats.rejected == rejected and time.monotonic() < deadline:
            time.sleep(0.01)
        for h in handles:
            h.cancel()

    drain = threading.Thread(target=drain_after_a_refusal)
    drain.start()
    try:
        policy = EndpointPolicy(EndpointConfig(url=server.url, model=MODEL_NAME, max_retries=4),
                                tokenizer)
        completion = policy.reply(episode)
    finally:
        drain.join()
    assert engine.stats.rejected > rejected  # it was refused at least once, then served
    assert completion.tokens and completion.finish_reason in ("stop", "length")


def test_launch_evaluate_endpoint_writes_the_report(server, tmp_path):
    stem = tmp_path / "endpoint_eval"
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--endpoint={server.url}",
         f"--model={MODEL_NAME}", f"--out={stem}", "--splits=test", "--categories=base",
         "--per_category=1", "--max_reply_tokens=8", "--max_episode_tokens=2400",
         "--concurrency=2", "--max_retries=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = json.loads(stem.with_suffix(".json").read_text())
    assert row["split"] == "test" and len(row["entries"]) == 1
    assert "| test |" in stem.with_suffix(".md").read_text()
    assert f"requests to {server.url}" in out.stdout


def test_launch_serve_refuses_bad_flags_before_loading_anything():
    out = subprocess.run([sys.executable, "launch/serve.py", "--max_batch=0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--max_batch must be >= 1" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unreachable_endpoint_fails_its_episodes_not_the_run(tokenizer):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    policy = EndpointPolicy(EndpointConfig(url=url, model="m", max_retries=0, timeout_s=5),
                            tokenizer)
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1, limits=LIMITS))
    episodes = rollout.episodes(load_split("test", ["base"], 1), EVAL_STAGE, progress=1.0, seed=0)
    policy.play(episodes)
    assert policy.failed_episodes == 1 and "APIConnectionError" in episodes[0].error
    assert report("test", episodes).entries[0].valid is False
