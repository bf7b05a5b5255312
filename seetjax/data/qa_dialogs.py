"""QA search oracle trajectories -> agent dialogs: the SFT warm-up of qa_search runs.

Each question is played by the oracle policy (`seetjax.envs.qa_search.oracle`: each hop's gold
sub-question as a search, then the last hop's answer) in the run's own environment (the same
section, so the same prompt, corpus, retriever and snippets); the dialog is the environment's
opening messages, each oracle reply written as the rollout's policy must write it (the python
call list as text, or structured `tool_calls` for the native style, as `bfcl_dialogs` writes
them) and the observations the environment answered. An episode the oracle does not finish
with an exact match is left out and counted (a world question always passes).
"""

from __future__ import annotations

from seetjax.data.bfcl_dialogs import assistant_message
from seetjax.data.dialogs import Dialog
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.env import gold_calls
from seetjax.envs.qa_search.run import QASearchRunConfig, load_tasks, make_env


def oracle_dialog(section: QASearchRunConfig, task: QATask) -> Dialog | None:
    """The oracle's dialog of `task` (None when it does not end in an exact match)."""
    env = make_env(section)
    messages = env.reset(task)
    for call in gold_calls(task):
        message, text = assistant_message([call], section.call_format == "hermes")
        result = env.step(text)
        messages += [message, *result.observations]
    if not (env.done and env.reward().exact_match):
        return None
    return Dialog(id=f"qa_search/{task.id}", messages=messages, tools=env.tools or [],
                  metadata={"source": "qa_search", "task_id": task.id, "hops": task.num_hops,
                            "prompt_style": section.prompt_style})


def oracle_dialogs(section: QASearchRunConfig, split: str, count: int | None
                   ) -> tuple[list[Dialog], dict[str, str]]:
    """The oracle dialogs of the split's first `count` questions, and those left out (why)."""
    dialogs, failed = [], {}
    for task in load_tasks(section, {}, split, count):
        dialog = oracle_dialog(section, task)
        if dialog is None:
            failed[task.id] = "the oracle's answer is not an exact match"
        else:
            dialogs.append(dialog)
    return dialogs, failed
