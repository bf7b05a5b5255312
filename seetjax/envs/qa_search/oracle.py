"""The oracle policy: searches each hop's gold sub-question, then answers the last hop's answer.

It is the upper bound the environment allows (a question of h hops takes exactly h searches; one
more where `QASearchConfig.oracle_recheck` draws the task) and the source of demonstration
trajectories. Replies are written in the environment's call format.
"""

from __future__ import annotations

import random

from seetjax.envs.base import StepResult
from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.env import QASearchEnv, gold_calls
from seetjax.tools.calls import ToolCall


def render_call(call: ToolCall, call_format: str) -> str:
    """One call as a reply: `[name(arg=...)]` (python) or a `<tool_call>` block (hermes)."""
    return f"[{call.to_python()}]" if call_format == "python" else call.to_hermes()


def oracle_calls(task: QATask, config: QASearchConfig) -> tuple[ToolCall, ...]:
    """The oracle's demonstration of `task`: its `gold_calls`, with the last search repeated
    before the answer for `config.oracle_recheck` of the tasks (drawn from the task id, so a task
    is rechecked in every demonstration or in none) where the search budget and the step limit
    leave room for it."""
    calls = gold_calls(task, config.oracle_spaced_answer)
    draw = random.Random(f"oracle_recheck:{task.id}").random()
    room = len(calls) <= config.search_budget and len(calls) < config.max_steps
    if len(calls) < 2 or not room or draw >= config.oracle_recheck:
        return calls
    return (*calls[:-1], calls[-2], calls[-1])


def play_oracle(env: QASearchEnv, task: QATask) -> list[StepResult]:
    """Plays `task` in `env` with the oracle's calls (`oracle_calls`), one reply each; returns
    the steps."""
    env.reset(task)
    return [env.step(render_call(call, env.call_format)) for call in oracle_calls(task, env.config)]
