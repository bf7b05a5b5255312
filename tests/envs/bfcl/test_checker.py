"""The checker against bfcl_eval's own `multi_turn_checker`, and its semantics case by case."""

import collections
import random

import pytest

from seetjax.envs.bfcl.checker import (
    EMPTY_TURN,
    FORCE_TERMINATED,
    RESPONSE_MISMATCH,
    STATE_MISMATCH,
    EntryResult,
    check_entry,
    entry_result,
    missing_outputs,
    summarize,
)
from seetjax.envs.bfcl.data import CATEGORIES, load_category, load_tasks
from seetjax.tools.calls import ToolCall
from tests.envs.bfcl.bfcl_reference import bfcl_check
from tests.envs.bfcl.perturb import KINDS, ground_truth_trajectory, perturb

ALL = [(task, raw) for c in CATEGORIES for task, raw in zip(load_tasks(c), load_category(c))]


def test_all_800_ground_truth_trajectories_pass_in_both_checkers():
    rng = random.Random(0)
    for task, raw in ALL:
        trajectory = ground_truth_trajectory(task, rng)  # calls split over steps at random
        assert check_entry(task, trajectory).valid, task.id
        assert bfcl_check(raw, trajectory)["valid"], task.id


def test_perturbed_trajectories_get_the_same_verdict_from_both_checkers():
    kinds = [*KINDS, "truncate"]
    rng = random.Random(1)
    verdicts = collections.Counter()
    for n, (task, raw) in enumerate(ALL):
        kind = kinds[n % len(kinds)]
        trajectory = perturb(task, kind, rng)
        ours = check_entry(task, trajectory)
        theirs = bfcl_check(raw, trajectory)
        assert ours.valid == theirs["valid"], (task.id, kind, ours, theirs.get("error_type"))
        if not ours.valid:
            assert ours.error_type == theirs["error_type"], (task.id, kind)
        verdicts[ours.valid] += 1
    assert sum(verdicts.values()) >= 500
    assert verdicts[True] >= 100 and verdicts[False] >= 300  # both outcomes well represented


BASE0 = load_tasks("base")[0]  # turn 0: cd, mkdir, mv; turn 1: cd, grep; turn 2: sort; turn 3: diff


def gt(turn):
    return list(BASE0.ground_truth[turn])


def test_empty_turn_fails_and_later_turns_still_get_verdicts():
    result = check_entry(BASE0, [[gt(0)], [], [gt(2)], [gt(3)]])
    assert not result.valid and result.error_type == EMPTY_TURN and result.message.startswith("turn 1")
    assert [v.passed for v in result.verdicts] == [True, False, False, False]


def test_state_check_compares_public_attributes():
    wrong = [ToolCall("cd", {"folder": "document"}), ToolCall("mkdir", {"dir_name": "tmp"})]
    result = check_entry(BASE0, [[wrong], [gt(1)], [gt(2)], [gt(3)]])
    assert result.verdicts[0].error_type == STATE_MISMATCH
    assert "GorillaFileSystem._current_dir" not in result.verdicts[0].message  # private: not compared


def test_response_check_counts_outputs_of_earlier_turns():
    # Turn 1's cd + grep done a turn early: the file tree is the same (the current directory is a
    # private attribute, not compared) and turn 1's grep output is among all outputs so far, so
    # turn 1 passes with any call at all, as in bfcl_eval.
    trajectory = [[gt(0) + gt(1)], [[ToolCall("pwd")]], [gt(2)], [gt(3)]]
    result = check_entry(BASE0, trajectory)
    assert result.valid and bfcl_check(load_category("base")[0], trajectory)["valid"]
    no_grep = [[gt(0)], [[ToolCall("cd", {"folder": "temp"})]], [gt(2)], [gt(3)]]
    assert check_entry(BASE0, no_grep).verdicts[1].error_type == RESPONSE_MISMATCH


def test_missing_outputs_is_a_multiset_subset():
    assert missing_outputs(["a", "b", "a"], ["a", "a"]) == []
    assert missing_outputs(["a", "b"], ["a", "a"]) == ["a"]
    assert missing_outputs([], ["x"]) == ["x"]


def test_force_terminated_when_turn_counts_differ():
    short = check_entry(BASE0, [[gt(0)], [gt(1)]])
    assert not short.valid and short.error_type == FORCE_TERMINATED
    assert [v.error_type for v in short.verdicts[2:]] == [FORCE_TERMINATED] * 2
    long = check_entry(BASE0, [[gt(t)] for t in range(4)] + [[]])
    assert not long.valid and long.error_type == FORCE_TERMINATED


def test_checked_turn_accuracy_counts_turns_never_reached_as_failed():
    assert check_entry(BASE0, [[gt(t)] for t in range(4)]).turn_accuracy == 1.0
    empty = check_entry(BASE0, [[gt(0)], [], [gt(2)], [gt(3)]])  # later turns fail too
    assert empty.turn_accuracy == 0.25
    short = check_entry(BASE0, [[gt(0)], [gt(1)]])  # 2 of the 4 turns that make calls
    assert short.turn_accuracy == 0.5
    # an episode cut short reports its reached turns only: the same figure
    assert entry_result(BASE0, short.verdicts[:2]).turn_accuracy == 0.5


def test_steps_without_calls_are_skipped_like_bfcls_decoder():
    trajectory = [[[], gt(t), []] for t in range(4)]
    assert check_entry(BASE0, trajectory).valid


def test_types_are_not_enforced_by_default_as_in_bfcl():
    # bfcl_eval runs an ill-typed call; here it overwrites a file with an integer, so the state
    # check fails. With type checks on, the call is rejected and changes nothing.
    overwrite = ToolCall("echo", {"content": 123, "file_name": "previous_report.pdf"})
    trajectory = [[gt(0) + [overwrite]], [gt(1)], [gt(2)], [gt(3)]]
    assert bfcl_check(load_category("base")[0], trajectory)["valid"] is False
    assert check_entry(BASE0, trajectory).error_type == STATE_MISMATCH
    assert check_entry(BASE0, trajectory, check_types=True).valid


def test_summary_is_the_unweighted_mean_of_categories():
    results = ([EntryResult(f"b{i}", "base", i < 3, ()) for i in range(4)]
               + [EntryResult(f"m{i}", "miss_func", i < 1, ()) for i in range(2)])
    report = summarize(results)
    assert report.accuracy == {"base": 0.75, "miss_func": 0.5}
    assert report.overall == pytest.approx(0.625) and not report.complete
    assert (report.correct, report.total) == ({"base": 3, "miss_func": 1}, {"base": 4, "miss_func": 2})
