"""A run's three evaluation milestones: figures, reuse of the training tasks' episodes, tables."""

import functools
import itertools

import numpy as np

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.splits import load_split
from seetjax.eval.evaluate import EVAL_STAGE, evaluate_tasks, markdown, redecode
from seetjax.rl.milestones import (
    Milestone,
    change_table,
    evaluate_milestone,
    first_per_category,
    milestone_table,
)
from seetjax.rollout.loop import Rollout, RolloutConfig
from tests.rollout.scripted import ScriptedPolicy

COMPACT = BfclEnvConfig(prompt_style="compact")  # the environment section of these rollouts


class AlternatingPolicy(ScriptedPolicy):
    """Per row: a call, then the end of the turn, then a call, ... (rows differ in what they get
    wrong, so a mix-up of episodes between splits would show); each play starts afresh."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, self.respond)

    def start(self, prompts):
        self.counters = {}

    def respond(self, row):
        n = next(self.counters.setdefault(row, itertools.count()))
        return "[ls()]" if (n + row) % 2 == 0 else "Done."


def test_a_split_of_the_training_tasks_reuses_their_episodes(tokenizer):
    train = load_split("train", per_category=1)
    test = load_split("test", per_category=1)
    policy = functools.partial(AlternatingPolicy, tokenizer)
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1))
    milestone = evaluate_milestone("after_rl", rollout, policy(), train,
                                   {"train": train, "test": test})
    assert set(milestone.tasks) == {"format_validity", "checked_turn_accuracy", "turn_accuracy",
                                    "reward"}
    assert milestone.tasks["format_validity"] == 1.0  # every scripted reply parses
    for split, tasks in (("train", train), ("test", test)):
        alone = evaluate_tasks(Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1)), policy(), tasks,
                               split).to_json()
        assert milestone.splits[split] == alone, split
    assert Milestone.from_json(milestone.to_json()) == milestone


class PositionalPolicy(ScriptedPolicy):
    """Per task (its prompt decides, whatever its row): `ls` with a positional argument, which the
    decodings read differently (lenient names it, bfcl_eval drops it), or with a keyword, read
    alike; then the end of the turn. Counts the episodes it plays."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, self.respond)
        self.played = 0

    @staticmethod
    def positional(prompt) -> bool:
        return sum(prompt) % 2 == 0

    def start(self, prompts):
        self.prompts, self.counters = [list(p) for p in prompts], {}
        self.played += len(prompts)

    def respond(self, row):
        if next(self.counters.setdefault(row, itertools.count())) % 2:
            return "Done."
        return "[ls(True)]" if self.positional(self.prompts[row]) else "[ls(a=True)]"


def test_redecoding_replays_only_the_episodes_that_read_differently(tokenizer):
    tasks = load_split("train", per_category=3)
    lenient = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1))
    official = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=BfclEnvConfig(prompt_style="compact", decoding="official")))
    played = lenient.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    lenient.play(played, PositionalPolicy(tokenizer))
    policy = PositionalPolicy(tokenizer)
    redecoded = redecode(official, policy, played, "train (official)")
    fresh = evaluate_tasks(official, PositionalPolicy(tokenizer), tasks, "train (official)")
    assert redecoded.to_json() == fresh.to_json()
    differing = sum(PositionalPolicy.positional(e.prompt) for e in played)
    assert 0 < differing < len(tasks) and policy.played == differing

    milestone = evaluate_milestone("after_rl", lenient, PositionalPolicy(tokenizer), tasks,
                                   {"train": tasks}, {"lenient": lenient, "official": official})
    assert list(milestone.splits) == ["train", "train (official)"]
    assert milestone.splits["train (official)"] == fresh.to_json()
    assert "eval/bfcl_train_official_overall" in milestone.metrics()


def _milestone(name, acc, overall):
    tasks = {"format_validity": acc, "checked_turn_accuracy": acc, "turn_accuracy": acc,
             "reward": acc}
    split = {"split": "test", "overall": overall, "accuracy": {"base": overall},
             "total": {"base": 4}, "agent": {"tool_selection_accuracy": 0.0, "plan_success": 0.0,
                                             "step_efficiency": 1.0, "timing_precision": 0.0,
                                             "end_to_end_success": overall}}
    return Milestone(name, tasks, {"test": split})


def test_table_rows_and_gains():
    table = milestone_table([_milestone("untrained", 0.0, 0.0),
                             _milestone("after_sft", 0.5, 0.25),
                             _milestone("after_rl", 0.75, 0.5)])
    assert "| untrained | 0.000 | 0.000 | 0.000 | 0.000 | 0.0 |" in table
    assert "| after SFT (start of RL) | 0.500 | 0.500 | 0.500 | 0.500 | 25.0 |" in table
    assert "| gain of SFT | +0.500 | +0.500 | +0.500 | +0.500 | +25.0 |" in table
    assert "| gain of RL | +0.250 | +0.250 | +0.250 | +0.250 | +25.0 |" in table
    assert "BFCL test overall" in table.splitlines()[0]


def test_metrics_keep_the_untrained_model_apart_from_the_start_of_rl():
    assert _milestone("untrained", 0.0, 0.1).metrics() == {
        "eval/untrained_format_validity": 0.0, "eval/untrained_checked_turn_accuracy": 0.0,
        "eval/untrained_turn_accuracy": 0.0, "eval/untrained_reward": 0.0,
        "eval/untrained_bfcl_test_overall": 0.1}
    after = _milestone("after_sft", 0.5, 0.2).metrics()
    assert after["eval/train_checked_turn_accuracy"] == 0.5
    assert after["eval/bfcl_test_overall"] == 0.2


def test_markdown_takes_reports_or_their_json():
    split = _milestone("after_rl", 0.5, 0.5).splits["test"]
    table = markdown([split])
    assert "| test | 50.0 | 50.0 | - | - | - | 4 |" in table


def _with_entries(milestone, valid, turn_accuracy=None):
    entries = [{"id": f"t{i}", "valid": v} for i, v in enumerate(valid)]
    for entry, accuracy in zip(entries, turn_accuracy or []):
        entry["checked_turn_accuracy"] = accuracy
    split = dict(milestone.splits["test"], entries=entries)
    return Milestone(milestone.name, milestone.tasks, {"test": split})


def test_rls_gain_has_a_paired_interval_over_the_tasks():
    # 20 tasks: RL fixes 8 and breaks 1 -> +35 points; the interval is the percentile bootstrap
    # of the per-task differences, computed here independently with numpy.
    before = [False] * 10 + [True] * 10
    after = [True] * 8 + [False] * 2 + [True] * 9 + [False]
    table = milestone_table([_with_entries(_milestone("after_sft", 0.5, 0.5), before),
                             _with_entries(_milestone("after_rl", 0.5, 0.75), after)])
    diff = np.array(after, float) - np.array(before, float)
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, 20, (2000, 20))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    assert f"| test | 20 | +35.0 [{100 * low:+.1f}, {100 * high:+.1f}] |" in table
    assert low > 0  # 8 fixed vs 1 broken out of 20 is more than resampling noise
    # without the after-SFT milestone (or entries to pair) there is no gain table
    assert "paired" not in milestone_table([_milestone("after_rl", 0.5, 0.75)])


def test_rls_gain_in_checked_turn_accuracy_beside_tasks_solved():
    # RL raises every task's turn accuracy by 0.25 and solves none more: the finer figure shows
    # it, with an interval of zero width (every resample has the same mean); entries written
    # before the figure existed show '-'.
    before, after = [0.25] * 4, [0.5] * 4
    table = milestone_table([_with_entries(_milestone("after_sft", 0.5, 0.5), [False] * 4, before),
                             _with_entries(_milestone("after_rl", 0.5, 0.5), [False] * 4, after)])
    assert "| split | tasks | BFCL overall | checked-turn accuracy |" in table
    assert "| test | 4 | +0.0 [+0.0, +0.0] | +0.250 [+0.250, +0.250] |" in table
    old = milestone_table([_with_entries(_milestone("after_sft", 0.5, 0.5), [False] * 4),
                           _with_entries(_milestone("after_rl", 0.5, 0.5), [False] * 4, after)])
    assert "| test | 4 | +0.0 [+0.0, +0.0] | - |" in old


def test_first_per_category_keeps_order_and_caps_each_category():
    from types import SimpleNamespace as T

    tasks = [T(id=i, category=c) for i, c in enumerate("aabbbacx")] + [T(id=99)]
    assert [t.id for t in first_per_category(tasks, 2)] == [0, 1, 2, 3, 6, 7, 99]
    assert first_per_category(tasks, 0) == tasks


def test_change_table_counts_gained_lost_and_the_failure_endings_that_moved():
    # Category a: RL solves t0, breaks t1 (net 0, two changes); t2 fails before and after, but
    # its failure turns from a wrong answer into a force-termination. Category b: untouched.
    def entries(valid, errors):
        return [{"id": f"t{i}", "category": "ab"[i // 3], "valid": v, "error_type": err}
                for i, (v, err) in enumerate(zip(valid, errors))]

    mismatch, forced = "multi_turn:execution_response_mismatch", "multi_turn:force_terminated"
    before = entries([False, True, False, True, False, False],
                     [mismatch, None, mismatch, None, mismatch, mismatch])
    after = entries([True, False, False, True, False, False],
                    [None, mismatch, forced, None, mismatch, mismatch])
    sft, rl = _milestone("after_sft", 0.5, 0.5), _milestone("after_rl", 0.5, 0.5)
    table = change_table([Milestone(sft.name, sft.tasks, {"test": dict(sft.splits["test"],
                                                                       entries=before)}),
                          Milestone(rl.name, rl.tasks, {"test": dict(rl.splits["test"],
                                                                     entries=after)})])
    assert ("| test | a | 3 | 1 | 1 | 1 | 1 | execution_response_mismatch 2 -> 1; "
            "force_terminated 0 -> 1 |") in table
    assert "| test | b | 3 | 1 | 1 | 0 | 0 | - |" in table
    # entries written before categories were: one row for the split
    old = change_table([_with_entries(sft, [False, True]), _with_entries(rl, [True, True])])
    assert "| test | all | 2 | 1 | 2 | 1 | 0 | unstated 1 -> 0 |" in old
    assert change_table([rl]) == ""
