"""The oracle policy: searches each hop's gold sub-question, then answers the last hop's answer.

It is the upper bound the environment allows (a question of h hops takes exactly h searches; one
more where `QASearchConfig.oracle_recheck` draws the task) and the source of demonstration
trajectories. Replies are written in the environment's call format.
"""

from __future__ import annotations

from seetjax.envs.base import StepResult
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.env import QASearchEnv, oracle_calls
from seetjax.tools.calls import ToolCall


def render_call(call: ToolCall, call_format: str) -> str:
    """One call as a reply: `[name(arg=...)]` (python) or a `<tool_call>` block (hermes)."""
    return f"[{call.to_python()}]" if call_format == "python" else call.to_hermes()


def play_oracle(env: QASearchEnv, task: QATask) -> list[StepResult]:
    """Plays `task` in `env` with the oracle's calls (`oracle_calls`), one reply each; returns
    the steps."""
    env.reset(task)
    return [env.step(render_call(call, env.call_format)) for call in oracle_calls(task, env.config)]
