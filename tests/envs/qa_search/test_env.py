"""QASearchEnv: the ToolEnv protocol over search/answer, budgets, errors, masking, rewinding."""

import re

import pytest

from seetjax.envs.base import StepCode
from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.env import (
    BUDGET_EXCEEDED,
    FORMAT_ERROR,
    STEP_LIMIT,
    WRONG_ANSWER,
    QASearchEnv,
)
from seetjax.envs.qa_search.masking import MASK
from seetjax.tools.executor import ExecutionErrorKind


@pytest.fixture
def task(world):
    return next(t for t in world.questions("train", 50) if t.num_hops == 2)


def test_reset_and_a_search(env, task):
    opening = env.reset(task)
    assert [m["role"] for m in opening] == ["system", "user"]
    assert opening[1]["content"] == task.question
    assert "search(query: str, k: int = 5)" in opening[0]["content"]
    assert "at most 3 times" in opening[0]["content"] and env.tools is None
    hop = task.hops[0]
    step = env.step(f"[search(query={hop.question!r}, k=2)]")
    assert step.code == StepCode.CLEAN_CALL and not step.done and not step.verdicts
    (observation,) = step.observations
    assert observation["role"] == "tool" and observation["name"] == "search"
    text = observation["content"]
    assert text.startswith(f"Search 1 of 3: 2 passages for {hop.question!r}.")
    assert f"[1] {hop.answer}" not in text and f"(doc {hop.passage_ids[0]}, score " in text
    assert hop.answer in text and "[3]" not in text
    assert env.history[-1] == observation


def test_answer_ends_the_episode_and_is_scored(env, task):
    env.reset(task)
    env.step(f"[search(query={task.hops[0].question!r})]")
    assert env.answered is None
    step = env.step(f"[answer(text={task.answers[-1].upper()!r}), search(query='more')]")
    assert env.answered == task.answers[-1].upper()  # as written; the reward normalises it
    assert step.done and step.code == StepCode.CLEAN_CALL and step.observations == ()
    assert [r.call.name for r in step.results] == ["answer"]  # the search after it never ran
    (verdict,) = step.verdicts
    assert verdict.passed and verdict.checked and verdict.error_type is None
    parts = env.reward()
    assert (parts.exact_match, parts.f1, parts.format, parts.searches) == (1.0, 1.0, 1.0, 1)
    assert parts.total == pytest.approx(1.1)
    trace = env.trace()
    assert trace.verdicts == (verdict,) and len(trace.steps) == 2
    assert [c.name for c in trace.ground_truth[0]] == ["search", "search", "answer"]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("[answer(text='x')]")


def test_plain_text_is_an_answer_without_format_credit(env, task):
    env.reset(task)
    step = env.step(task.answers[0])
    assert step.code == StepCode.NO_CALL and step.done and step.verdicts[0].passed
    assert env.reward().exact_match == 1.0 and env.reward().format == 0.0
    assert env.answered == task.answers[0]
    env.reset(task)
    assert env.answered is None
    step = env.step("I do not know.")
    assert not step.verdicts[0].passed and step.verdicts[0].error_type == WRONG_ANSWER


def test_malformed_reply_gets_a_format_error_observation(env, task):
    env.reset(task)
    step = env.step("[search(query='unclosed)]")
    assert step.code == StepCode.FORMAT_ERROR and not step.done and step.parse_error
    assert step.observations[0]["content"].startswith("Error: could not parse python tool calls")
    env.step(f"[answer(text={task.answers[0]!r})]")
    parts = env.reward()
    assert parts.exact_match == 1.0 and parts.format == 0.0  # the format error costs the credit
    env.reset(task)
    step = env.step("[search(query=x)]", format_error_ends_turn=True)
    assert step.done and step.verdicts[0].error_type == FORMAT_ERROR
    ending = QASearchEnv(env.retriever, QASearchConfig(format_error_ends_episode=True))
    ending.reset(task)
    assert ending.step("[answer(text=").done


@pytest.mark.parametrize("reply, kind", [
    ("[search(query='a', k=11)]", ExecutionErrorKind.INVALID_ARGUMENTS),
    ("[search(query='a', k=0)]", ExecutionErrorKind.INVALID_ARGUMENTS),
    ("[search(q='a')]", ExecutionErrorKind.INVALID_ARGUMENTS),
    ("[answer(text=3)]", ExecutionErrorKind.INVALID_ARGUMENTS),
    ("[lookup(query='a')]", ExecutionErrorKind.UNKNOWN_FUNCTION),
    ("[search(query='  ')]", ExecutionErrorKind.API_EXCEPTION),
])
def test_bad_calls_are_execution_errors_and_cost_no_search(env, task, reply, kind):
    env.reset(task)
    step = env.step(reply)
    assert step.code == StepCode.EXECUTION_ERROR and not step.done
    assert step.results[0].error == kind
    assert step.observations[0]["content"].startswith("Error during execution: ")
    assert env.search_tools.searches == 0


def test_search_past_the_budget_times_out_with_the_penalty(env, task):
    env.reset(task)
    step = env.step("[search(query='a'), search(query='b')]")
    assert len(step.observations) == 2 and env.search_tools.searches == 2
    step = env.step("[search(query='c'), search(query='d')]")
    assert step.done and step.timeout and env.search_tools.searches == 3
    assert [r.call.name for r in step.results] == ["search"] and len(step.calls) == 2
    assert step.verdicts[0].error_type == BUDGET_EXCEEDED and not step.verdicts[0].passed
    assert env.answered is None
    parts = env.reward()
    assert parts.timeout_penalty == 0.5 and parts.total == pytest.approx(-0.5)


def test_too_many_replies_time_out(world_retriever, task):
    env = QASearchEnv(world_retriever, QASearchConfig(max_steps=2))
    env.reset(task)
    assert not env.step("[nope(]").done and not env.step("[nope(]").done
    step = env.step("[nope(]")
    assert step.done and step.timeout and step.verdicts[0].error_type == STEP_LIMIT
    env.reset(task)
    env.step("[nope(]")
    env.step("[nope(]")
    assert env.step(f"[answer(text={task.answers[0]!r})]").verdicts[0].passed  # answers still count


def test_search_cost_per_search(world_retriever, task):
    env = QASearchEnv(world_retriever, QASearchConfig(search_cost=0.1, format_weight=0.0))
    env.reset(task)
    for hop in task.hops:
        env.step(f"[search(query={hop.question!r})]")
    env.step(f"[answer(text={task.answers[0]!r})]")
    assert env.reward().search_penalty == pytest.approx(0.2)
    assert env.reward().total == pytest.approx(0.8)


def test_retrieved_words_are_masked_exactly_and_reproducibly(world_retriever, task):
    config = QASearchConfig(retrieval_mask_ratio=0.25, snippet_words=10, default_k=3)
    env = QASearchEnv(world_retriever, config)

    def observed():
        env.reset(task)
        return env.step(f"[search(query={task.hops[0].question!r})]").observations[0]["content"]

    text = observed()
    snippets = [line for line in text.splitlines()[1:] if not re.match(r"\[\d+\] ", line)]
    words = [w for s in snippets for w in s.split()]
    assert len(snippets) == 3 and len(words) == 30
    assert words.count(MASK) == 7  # floor(0.25 * 30)
    assert "doc world/" in text and MASK not in text.splitlines()[0]
    assert observed() == text


def test_native_prompt_style_reads_tool_call_blocks(world_retriever, task):
    env = QASearchEnv(world_retriever, QASearchConfig(prompt_style="native"))
    opening = env.reset(task)
    assert [t["function"]["name"] for t in env.tools] == ["search", "answer"]
    assert env.tools[0]["function"]["parameters"]["properties"]["k"]["type"] == "integer"
    assert "Tools:" not in opening[0]["content"] and env.call_format == "hermes"
    step = env.step('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>')
    assert step.code == StepCode.CLEAN_CALL


def test_snapshot_and_restore(env, task):
    env.reset(task)
    env.step("[search(query='a')]")
    snapshot = env.snapshot()
    env.step("[search(query='b')]")
    env.step("[answer(text='nope')]")
    assert env.done
    env.restore(snapshot)
    assert not env.done and env.search_tools.searches == 1 and len(env.trace().steps) == 1
    assert env.step(f"[answer(text={task.answers[0]!r})]").verdicts[0].passed
    assert env.reward().searches == 1


def test_state_keys_follow_what_was_found_not_the_history(env, task):
    from seetjax.envs.state_keys import state_key

    env.reset(task)
    start = state_key(env)
    env.step("[search(query='a')]")
    searched = state_key(env)
    snapshot = env.snapshot()
    env.step("not a call(")  # a format error: the reward's format credit is gone
    assert len({start, searched, state_key(env)}) == 3
    env.restore(snapshot)
    assert state_key(env) == searched
    env.reset(task)
    assert state_key(env) == start
