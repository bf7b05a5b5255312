"""A run's three evaluation milestones: figures, reuse of the training tasks' episodes, tables."""

import functools
import itertools

from seetjax.envs.bfcl import load_split
from seetjax.eval.evaluate import evaluate_tasks, markdown
from seetjax.eval.milestones import Milestone, evaluate_milestone, milestone_table
from seetjax.rollout.loop import Rollout, RolloutConfig, ScriptedPolicy


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
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1))
    milestone = evaluate_milestone("after_rl", rollout, policy(), train,
                                   {"train": train, "test": test})
    assert set(milestone.tasks) == {"format_validity", "checked_turn_accuracy", "turn_accuracy",
                                    "reward"}
    assert milestone.tasks["format_validity"] == 1.0  # every scripted reply parses
    for split, tasks in (("train", train), ("test", test)):
        alone = evaluate_tasks(Rollout(tokenizer, RolloutConfig(group_size=1)), policy(), tasks,
                               split).to_json()
        assert milestone.splits[split] == alone, split
    assert Milestone.from_json(milestone.to_json()) == milestone


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
