"""QA search oracle trajectories -> agent dialogs: the SFT warm-up of qa_search runs.

Each question is played by the oracle policy (`seetjax.envs.qa_search.oracle`: each hop's gold
sub-question as a search, then the last hop's answer) in the run's own environment (the same
section, so the same prompt, corpus, retriever and snippets); the dialog is the environment's
opening messages, each oracle reply written as the rollout's policy must write it (the python
call list as text, or structured `tool_calls` for the native style, as `bfcl_dialogs` writes
them) and the observations the environment answered. An episode the oracle does not finish
with an exact match is left out and counted (a world question always passes).

The oracle team (`team_dialogs`, source "qa_team", the warm-up of multi-agent runs) plays a
question as `seetjax.rollout.multi_agent` does: the coordinator (`CoordinatorEnv`) delegates each
hop's gold sub-question in its own round (a later hop's sub-question names the answer the worker
of the hop before it gave), each worker (`worker_env`, `worker_task`: the rollout's own) is the
oracle on its one-hop task, and the coordinator answers with the last worker's answer. Each
agent's episode is a dialog of its own, as each is its own row in a rollout.
"""

from __future__ import annotations

from seetjax.data.bfcl_dialogs import assistant_message
from seetjax.data.dialogs import Dialog
from seetjax.envs.base import Message, ToolEnv
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.env import QASearchEnv
from seetjax.envs.qa_search.oracle import oracle_calls
from seetjax.envs.qa_search.reward import exact_match
from seetjax.envs.qa_search.run import QASearchRunConfig, load_tasks, make_env
from seetjax.rollout.coordinator import CoordinatorEnv
from seetjax.rollout.multi_agent import worker_env, worker_task
from seetjax.tools.calls import ToolCall

TEAM_SOURCE = "qa_team"


def oracle_dialog(section: QASearchRunConfig, task: QATask) -> Dialog | None:
    """The oracle's dialog of `task` (None when it does not end in an exact match)."""
    env = make_env(section)
    messages = _play(env, task, section)
    if not (env.done and env.reward().exact_match):
        return None
    return Dialog(id=f"qa_search/{task.id}", messages=messages, tools=env.tools or [],
                  metadata={"source": "qa_search", "task_id": task.id, "hops": task.num_hops,
                            "prompt_style": section.prompt_style})


def team_dialogs(section: QASearchRunConfig, max_rounds: int, task: QATask
                 ) -> list[Dialog] | None:
    """The oracle team's dialogs of `task`, the coordinator's first, then each worker's in round
    order (None when the team does not end in an exact match within `max_rounds` coordinator
    replies, or a worker's answer misses its hop's)."""
    coordinator = CoordinatorEnv(section, max_rounds)
    messages = coordinator.reset(task)
    workers, answer = [], task.answers[0]  # a question without hops: no worker to ask
    for round_, hop in enumerate(task.hops):
        message, text = _reply(ToolCall("delegate", {"question": hop.question}), section)
        question = coordinator.delegation(text)
        if question is None:  # the round cap leaves no reply for this hop
            return None
        sub = worker_task(task, question, round_)
        env = worker_env(section)
        workers.append(_dialog(f"{TEAM_SOURCE}/{task.id}/worker{round_}", _play(env, sub, section),
                               env, section, task, role="worker", round=round_))
        answer = env.answered
        if answer is None or not exact_match(answer, sub.answers):
            return None
        coordinator.deliver(answer, env.search_tools.searches)
        messages += [message, *coordinator.step(text).observations]
    message, text = _reply(ToolCall("answer", {"text": answer}), section)
    messages += [message, *coordinator.step(text).observations]
    if not (coordinator.done and coordinator.team_reward().exact_match):
        return None
    return [_dialog(f"{TEAM_SOURCE}/{task.id}/coordinator", messages, coordinator, section, task,
                    role="coordinator", rounds=len(task.hops) + 1), *workers]


def oracle_dialogs(section: QASearchRunConfig, split: str, count: int | None,
                   max_rounds: int | None = None) -> tuple[list[Dialog], dict[str, str]]:
    """The oracle dialogs of the split's first `count` questions, and those left out (why); with
    `max_rounds`, the oracle team's (`team_dialogs`)."""
    dialogs, failed = [], {}
    for task in load_tasks(section, {}, split, count):
        if max_rounds is None:
            dialog = oracle_dialog(section, task)
            played = None if dialog is None else [dialog]
        else:
            played = team_dialogs(section, max_rounds, task)
        if played is None:
            failed[task.id] = ("the oracle's answer is not an exact match" if max_rounds is None
                               else f"the oracle team's answer is not an exact match within "
                                    f"{max_rounds} coordinator replies")
        else:
            dialogs += played
    return dialogs, failed


def _reply(call: ToolCall, section: QASearchRunConfig) -> tuple[dict, str]:
    """The assistant message making `call`, and its text as the policy writes it."""
    return assistant_message([call], section.call_format == "hermes")


def _play(env: QASearchEnv, task: QATask, section: QASearchRunConfig) -> list[Message]:
    """The messages of the oracle's episode of `task` in `env`: its opening, each of its calls
    (`oracle_calls`) and the observations it got."""
    messages = env.reset(task)
    for call in oracle_calls(task, section):
        message, text = _reply(call, section)
        messages += [message, *env.step(text).observations]
    return messages


def _dialog(id_: str, messages: list[Message], env: ToolEnv, section: QASearchRunConfig,
            task: QATask, **metadata: object) -> Dialog:
    """A team member's dialog, its metadata naming the question, the role and the round."""
    return Dialog(id=id_, messages=messages, tools=env.tools or [],
                  metadata={"source": TEAM_SOURCE, "task_id": task.id, "hops": task.num_hops,
                            "prompt_style": section.prompt_style, **metadata})
