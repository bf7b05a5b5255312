"""The teacher acts in a live environment: one episode of a scenario through an endpoint.

The scenario's task runs in `BfclEnv` (native prompt style: tools in the request's `tools`,
calls read as `<tool_call>` blocks): each reply's tool calls are executed by our executor on the
episode's own instances and the results go back to the teacher as `tool` messages, step after
step; a reply without calls ends the user turn and the script's next turn follows. The
conversation goes out through `seetjax.serving.client.chat_messages` and replies come back
through `reply_text`, as in endpoint evaluation. The teacher stays the same for a whole episode:
if its endpoint fails, the episode starts again on the pool's next endpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from seetjax.distill.config import DistillConfig, EndpointSpec
from seetjax.distill.endpoints import SCENARIO_HEADER, BudgetSpent, Endpoint, EndpointFailed
from seetjax.distill.pools import Pool
from seetjax.distill.records import Turn, build_turns
from seetjax.distill.scenarios import Scenario
from seetjax.envs.base import EpisodeTrace
from seetjax.envs.bfcl.checker import EntryResult
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.serving.client import chat_messages, reply_text
from seetjax.tools.calls import ParseError, parse_tool_calls

REFLECTION_PROMPT = ("Before we finish: check your last answer against the tool results above. "
                     "Reply with the corrected final answer only (no tool calls), following the "
                     "same instructions; repeat it unchanged if it is right.")


@dataclasses.dataclass
class Attempt:
    """One teacher attempt at a scenario. `failure` is set (and the rest empty) when no endpoint
    of the pool could play it; `budget` when that was for lack of budget."""

    scenario: Scenario
    system: str
    turns: list[Turn] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    trace: EpisodeTrace | None = None
    result: EntryResult | None = None
    endpoint: EndpointSpec | None = None
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reflection_passes: int = 0
    finish_reasons: list[str | None] = dataclasses.field(default_factory=list)  # per reply
    failure: str = ""
    budget: bool = False


def env_config(config: DistillConfig) -> BfclEnvConfig:
    return BfclEnvConfig(prompt_style="native", call_format="hermes",
                         max_steps_per_turn=config.episode.max_steps_per_turn)


async def play(scenario: Scenario, system: str, pool: Pool, config: DistillConfig
               ) -> Attempt:
    """The scenario played by the pool's endpoints in `pool.order(scenario.id)` until one
    finishes it (see the module docstring)."""
    attempt = Attempt(scenario, system)
    budget_only = True
    for endpoint in pool.order(scenario.id):
        try:
            return await _play_on(endpoint, attempt, config)
        except BudgetSpent as e:
            attempt.fallbacks.append(str(e))
        except EndpointFailed as e:
            attempt.fallbacks.append(str(e))
            budget_only = False
    attempt.failure = "; ".join(attempt.fallbacks)
    attempt.budget = budget_only
    return attempt


async def _play_on(endpoint: Endpoint, attempt: Attempt, config: DistillConfig) -> Attempt:
    env = BfclEnv(env_config(config))
    env.reset(attempt.scenario.task)
    system = {"role": "system", "content": attempt.system}
    headers = {SCENARIO_HEADER: attempt.scenario.id}
    prompt_tokens = completion_tokens = 0
    finish_reasons = []  # the validators reject a reply cut by max_tokens ("length")
    while not env.done:
        reply = await endpoint.chat([system, *chat_messages(env.history, True, "hermes")],
                                    env.tools, headers)
        finish_reasons.append(reply.finish_reason)
        prompt_tokens += reply.prompt_tokens
        completion_tokens += reply.completion_tokens
        env.step(reply_text(reply.message.content, reply.message.tool_calls or []))
    passes = 0
    if not env.trace().steps[-1].timeout:
        for _ in range(config.episode.reflection_passes):
            reply = await endpoint.chat(
                [system, *chat_messages(env.history, True, "hermes"),
                 {"role": "user", "content": REFLECTION_PROMPT}], env.tools, headers,
                tool_choice="none")
            finish_reasons.append(reply.finish_reason)
            prompt_tokens += reply.prompt_tokens
            completion_tokens += reply.completion_tokens
            revised = (reply.message.content or "").strip()
            calls = parse_tool_calls(revised, "hermes")
            # Only a plain answer may replace the final one: the episode's calls are done.
            if revised and not isinstance(calls, ParseError) and not calls:
                env.history[-1] = {"role": "assistant", "content": revised}
            passes += 1
    attempt.turns = build_turns(attempt.system, env.history)
    attempt.tools = env.tools or []
    attempt.trace, attempt.result = env.trace(), env.result()
    attempt.endpoint = endpoint.spec
    attempt.prompt_tokens, attempt.completion_tokens = prompt_tokens, completion_tokens
    attempt.reflection_passes, attempt.finish_reasons = passes, finish_reasons
    return attempt
