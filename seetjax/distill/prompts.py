"""The prompt & context builder: the teacher's system prompt for a scenario.

Global guardrails come first and always stay (English-first narrative, tools only, no invented
results, a closing answer per request, a concise Chinese summary where the language policy asks
for one); then the scenario's goal and environment assumptions, the run's and the scenario's
extra instructions, and on a refinement round the feedback of the rounds before. The tools go in
the request's native `tools` field, not in this text.
"""

from __future__ import annotations

from collections.abc import Sequence

from seetjax.distill.config import DistillConfig
from seetjax.distill.scenarios import Scenario

GUARDRAILS = "\n".join((
    "You are a careful assistant that completes the user's requests with the tools provided.",
    "- Write all reasoning and answers in clear English.",
    "- Use only the tools provided, with argument values taken from the user's words or from "
    "earlier tool results; never invent values or results.",
    "- Call a tool only when a request needs it; if a request cannot be done with the tools, or "
    "a needed value is missing, do not guess: say so and ask.",
    "- Before each call, state in one short sentence why you make it.",
    "- When a request is done, reply without tool calls: a short final answer saying what was "
    "done and what the tools returned."))

CHINESE_SUMMARY = ("- End every final answer with one line that starts with '{marker}' and gives a "
                   "concise summary in Chinese.")


def require_chinese_summary(config: DistillConfig, scenario: Scenario) -> bool:
    """The scenario's override, else the run's language policy."""
    override = scenario.spec.prompt.require_chinese_summary
    return config.language_policy.require_chinese_summary if override is None else override


def system_prompt(config: DistillConfig, scenario: Scenario,
                  feedback: Sequence[str] = ()) -> str:
    """The teacher's system prompt for `scenario` (see the module docstring)."""
    guardrails = config.prompt.guardrails or GUARDRAILS
    if require_chinese_summary(config, scenario):
        guardrails += "\n" + CHINESE_SUMMARY.format(marker=config.language_policy.summary_marker)
    parts = [guardrails]
    template = scenario.template
    parts.append(f"Goal: {template.goal}")
    parts.append("Environment:\n" + "\n".join(f"- {a}" for a in template.assumptions))
    parts += [text for text in (config.prompt.extra, scenario.spec.prompt.extra) if text]
    if feedback:
        parts.append("Feedback on your previous attempt at this task (address all of it):\n"
                     + "\n".join(f"- {f}" for f in feedback))
    return "\n\n".join(parts)
