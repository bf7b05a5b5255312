"""BFCL single-turn entries -> tool_selection and tool_retrieval dialogs: counts, determinism,
the checker on every reply read back, the split, and task weighting over all four types."""

import logging

import pytest

from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.dialogs import Dialog, tool_calls, type_counts
from seetjax.data.single_turn_dialogs import (
    NO_FITTING_TOOL,
    CandidateLibrary,
    check_reply,
    held_out_ids,
    held_out_tool_names,
    retrieval_task,
    single_turn_dialogs,
)
from seetjax.data.weighting import DEFAULT_TASK_WEIGHTS, effective_weights
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn import IRRELEVANCE, load_tasks
from seetjax.tools.calls import ToolCall

STYLES = [BfclEnvConfig(prompt_style="bfcl"), BfclEnvConfig(prompt_style="native"),
          BfclEnvConfig(prompt_style="compact"),
          BfclEnvConfig(prompt_style="compact", call_format="hermes")]


@pytest.fixture(scope="module")
def library():
    return CandidateLibrary()


def entry(dialog: Dialog):
    category = dialog.metadata.get("entry_category", dialog.metadata["category"])
    return next(t for t in load_tasks(category) if t.id == dialog.metadata["task_id"])


def reply_text(dialog: Dialog) -> str:
    """The reply as the environment reads it: `<tool_call>` blocks for structured calls."""
    last = dialog.messages[-1]
    calls = [ToolCall(f["name"], f["arguments"]) for f in tool_calls(last)]
    return "\n".join(c.to_hermes() for c in calls) if calls else last["content"]


def test_counts_per_type_and_the_type_set_in_the_metadata():
    dialogs, report = single_turn_dialogs(STYLES[2], 40, 30, seed=0)
    assert type_counts(dialogs) == {"tool_selection": 40, "multi_step_planning": 0,
                                    "timing_decision": 0, "tool_retrieval": 30}
    assert (report.selection, report.retrieval) == (40, 30)
    assert len({d.id for d in dialogs}) == 70
    assert all(d.metadata["source"] == "bfcl_single_turn" for d in dialogs)
    retrieved = [d for d in dialogs if d.task_type == "tool_retrieval"]
    assert all(d.metadata["num_tools_offered"] <= 5 == d.metadata["retrieved_k"]
               for d in retrieved)
    none, empty = single_turn_dialogs(STYLES[2], 0, 0)
    assert none == [] and (empty.selection, empty.retrieval) == (0, 0)


@pytest.mark.parametrize("config", STYLES, ids=lambda c: f"{c.prompt_style}-"
                         f"{c.resolved_call_format}")
def test_every_reply_passes_the_checker_read_back_with_the_styles_parser(config, library):
    dialogs, report = single_turn_dialogs(config, 150, 100, seed=3)
    assert (report.selection, report.retrieval) == (150, 100)
    no_call = 0
    for dialog in dialogs:
        task = entry(dialog)
        if dialog.task_type == "tool_retrieval":
            task = retrieval_task(task, library, dialog.metadata["retrieved_k"], 3)
            assert task.category == dialog.metadata["category"]
            names = [f["name"].replace(".", "_") for f in task.docs]
            assert len(set(names)) == len(names)  # never two functions of one name
        verdict = check_reply(task, reply_text(dialog), config)
        assert verdict.valid, (dialog.id, reply_text(dialog), verdict)
        # the reply calls only functions the prompt shows
        shown = dialog.tools and [t["function"]["name"] for t in dialog.tools]
        prompt = dialog.messages[0]["content"]
        for f in tool_calls(dialog.messages[-1]):
            assert f["name"] in shown if shown else f["name"] in prompt
        if task.category in IRRELEVANCE:
            assert dialog.messages[-1] == {"role": "assistant", "content": NO_FITTING_TOOL}
            no_call += 1
    assert no_call  # the sample holds irrelevance entries


def test_same_seed_same_dialogs_and_a_larger_count_extends_a_smaller():
    config = STYLES[0]
    first = [d.to_json() for d in single_turn_dialogs(config, 25, 25, seed=7)[0]]
    again = [d.to_json() for d in single_turn_dialogs(config, 25, 25, seed=7)[0]]
    assert first == again
    other = [d.to_json() for d in single_turn_dialogs(config, 25, 25, seed=8)[0]]
    assert {d["id"] for d in other} != {d["id"] for d in first}
    more = [d.to_json() for d in single_turn_dialogs(config, 30, 30, seed=7)[0]]
    assert more[:25] == first[:25] and more[30:55] == first[25:]


def test_test_entries_never_train_and_unseen_tools_are_never_offered(library):
    dialogs, report = single_turn_dialogs(STYLES[1], -1, -1, k=3)
    held_out = held_out_ids()
    assert held_out and not {d.metadata["task_id"] for d in dialogs} & held_out
    # the split holds out a share of every category used
    for category in ("simple", "live_multiple", "irrelevance"):
        ids = {t.id for t in load_tasks(category)}
        assert 0 < len(ids & held_out) < len(ids)
    unseen = held_out_tool_names()
    assert unseen and not unseen & {d.name for d in library.docs}
    offered = {f["name"] for d in dialogs if d.task_type == "tool_retrieval"
               for f in retrieval_task(entry(d), library, 3, 0).docs}
    assert offered and not unseen & offered
    # every retrieval entry is made, skipped (gold not among the k) or reported
    eligible = report.eligible["tool_retrieval"]
    failed = sum(key.startswith("tool_retrieval/") for key in report.failed)
    assert report.retrieval + report.retrieval_missed + failed == eligible
    assert report.retrieval_missed > 0


def test_task_weighting_sees_all_four_types_without_a_warning(caplog):
    multi_turn, _ = bfcl_dialogs("train", ["base", "miss_param"], per_category=4,
                                 prompt_style="compact")
    single, _ = single_turn_dialogs(STYLES[2], 10, 10)
    with caplog.at_level(logging.WARNING, logger="seetjax.data.weighting"):
        effective_weights(type_counts(multi_turn), DEFAULT_TASK_WEIGHTS)
    assert "no examples of ['tool_selection', 'tool_retrieval']" in caplog.text
    caplog.clear()
    counts = type_counts(multi_turn + single)
    assert all(counts.values()), counts
    with caplog.at_level(logging.WARNING, logger="seetjax.data.weighting"):
        weights = effective_weights(counts, DEFAULT_TASK_WEIGHTS)
    assert not caplog.records and weights == pytest.approx(DEFAULT_TASK_WEIGHTS)


@pytest.mark.parametrize("kwargs, message", [
    (dict(selection=-2, retrieval=0), "selection=-2"),
    (dict(selection=1, retrieval=1.5), "retrieval=1.5"),
    (dict(selection=1, retrieval=0, categories=["live_relevance"]), "live_relevance"),
    (dict(selection=0, retrieval=1, categories=["irrelevance"]), "retrieval needs one of"),
    (dict(selection=0, retrieval=1, k=0), "k=0"),
])
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        single_turn_dialogs(STYLES[0], **kwargs)
