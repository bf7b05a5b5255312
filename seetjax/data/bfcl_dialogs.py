"""BFCL multi-turn ground truth -> agent dialogs, executed for real tool results.

Each task's ground truth is replayed through `BfclEnv` on the episode's own API instances: the
assistant makes the turn's ground-truth calls (one call per message, or all of a turn's calls in
one message with `parallel_calls`; `_steps` handles turns with more calls than steps allowed),
the environment answers with the real outputs, and a short closing message without calls ends the
turn, as the environment requires. The finished episode must pass BFCL's own check; one that does
not is reported and left out, never written.

BFCL's ground truth holds calls only, so the closing messages are fixed texts (`Closings`): one
after a turn's calls, one for a turn whose tool is missing (miss_func, before the tool is
revealed), one for a turn missing a parameter (miss_param), one for any other turn without calls.

Assistant calls follow the prompt style: structured `tool_calls` (rendered by the chat template as
`<tool_call>` blocks) for "native" and for "compact" with the hermes format, BFCL's python list
`[f(a=1), g(b='x')]` as message text for "bfcl" and "compact" with the python format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from seetjax.data.dialogs import Dialog, listing
from seetjax.envs.base import StepCode
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.bfcl.splits import load_split
from seetjax.tools.calls import ToolCall


@dataclasses.dataclass(frozen=True)
class Closings:
    """The assistant's closing text of a turn, by why the turn ends."""

    done: str = "I have completed the request."
    missing_function: str = "None of the available functions can do this."
    missing_parameter: str = ("I cannot do this yet: a required parameter is missing. "
                              "Please provide the missing information.")
    nothing_to_do: str = "There is nothing to do for this request."

    def for_turn(self, task: BfclTask, turn: int) -> str:
        if task.ground_truth[turn]:
            return self.done
        return {"miss_func": self.missing_function,
                "miss_param": self.missing_parameter}.get(task.category, self.nothing_to_do)


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """Dialogs converted, and the tasks left out with the reason."""

    converted: int
    failed: dict[str, str]

    def __str__(self) -> str:
        return (f"{self.converted} dialogs converted, {len(self.failed)} tasks left out"
                + listing(self.failed))


class ReplayFailure(Exception):
    """The ground truth of a task did not replay cleanly (see `task_dialog`)."""


def task_dialog(task: BfclTask, config: BfclEnvConfig, *, parallel_calls: bool = False,
                closings: Closings = Closings(), split: str | None = None) -> Dialog:
    """The dialog of one task's ground truth, replayed in an environment with `config`.

    Raises ReplayFailure when a ground-truth call fails, a step is refused, or the episode does
    not pass BFCL's check (e.g. miss_func_49, whose ground truth calls a held-out tool before the
    turn that reveals it, fails with `enforce_held_out`).
    """
    env = BfclEnv(config)
    messages = env.reset(task)
    tools = env.tools or []  # the tools shown at the start; revealed ones come in a user message
    structured = config.resolved_call_format == "hermes"
    for turn, calls in enumerate(task.ground_truth):
        for step_calls in _steps(calls, parallel_calls, config.max_steps_per_turn):
            message, text = assistant_message(step_calls, structured)
            result = env.step(text)
            if result.code != StepCode.CLEAN_CALL or result.done:
                failed = next((r for r in result.results if not r.ok), None)
                why = failed.output if failed else result.parse_error or result.code.name
                raise ReplayFailure(f"turn {turn}: {[c.to_python() for c in step_calls]}: {why}")
            messages += [message, *result.observations]
        closing = closings.for_turn(task, turn)
        result = env.step(closing)
        if result.code != StepCode.NO_CALL:
            raise ReplayFailure(f"turn {turn}: the closing message {closing!r} reads as a call")
        messages += [{"role": "assistant", "content": closing}, *result.observations]
    verdict = env.result()
    if not verdict.valid:
        raise ReplayFailure(f"BFCL check failed: {verdict.error_type}: {verdict.message}")
    revealed = sum(len(docs) for docs in task.held_out.values())
    metadata = {"source": "bfcl", "task_id": task.id, "category": task.category,
                "prompt_style": config.prompt_style, "call_format": config.resolved_call_format,
                "parallel_calls": parallel_calls, "num_tools_offered": len(task.docs) + revealed}
    if split is not None:
        metadata["split"] = split
    return Dialog(id=f"bfcl/{config.prompt_style}/{task.id}", messages=messages, tools=tools,
                  metadata=metadata)


def bfcl_dialogs(split: str = "train", categories: Sequence[str] = CATEGORIES, *,
                 prompt_style: str = "native", call_format: str | None = None,
                 parallel_calls: bool = False, closings: Closings = Closings(),
                 tasks: Iterable[BfclTask] | None = None, per_category: int | None = None,
                 compact_description_chars: int = 80
                 ) -> tuple[list[Dialog], ConversionReport]:
    """Dialogs of every task of `split` in `categories` (the first `per_category` of each, or
    `tasks` given instead), and a report naming the tasks whose ground truth did not replay
    cleanly. The prompt settings should be those of the RL rollouts that follow."""
    config = BfclEnvConfig(prompt_style=prompt_style, call_format=call_format,
                           compact_description_chars=compact_description_chars)
    dialogs, failed = [], {}
    for task in load_split(split, categories, per_category) if tasks is None else tasks:
        try:
            dialogs.append(task_dialog(task, config, parallel_calls=parallel_calls,
                                       closings=closings,
                                       split=split if tasks is None else None))
        except ReplayFailure as e:
            failed[task.id] = str(e)
    return dialogs, ConversionReport(len(dialogs), failed)


def _steps(calls: Sequence[ToolCall], parallel: bool, max_steps: int) -> list[Sequence[ToolCall]]:
    """A turn's calls split into assistant messages: one call each (all in one with `parallel`);
    a turn with more calls than the environment allows steps (a long_context turn has 34) puts
    consecutive calls together so it fits."""
    if not calls:
        return []
    size = len(calls) if parallel else -(-len(calls) // max_steps)
    return [calls[i:i + size] for i in range(0, len(calls), size)]


def assistant_message(calls: Sequence[ToolCall], structured: bool) -> tuple[dict, str]:
    """The assistant message making `calls` and the text the environment reads for it."""
    if structured:
        message = {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": c.to_json()} for c in calls]}
        return message, "\n".join(c.to_hermes() for c in calls)
    text = "[" + ", ".join(c.to_python() for c in calls) + "]"
    return {"role": "assistant", "content": text}, text
