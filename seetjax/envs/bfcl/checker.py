"""BFCL multi-turn checking with bfcl_eval's semantics, on our safe executor.

Per turn, as bfcl_eval's `multi_turn_checker` does:

1. the model's calls of the turn run on the model's instances, and the turn's ground-truth calls on
   shadow instances that only ever see ground truth (both persist across turns);
2. a turn whose ground truth is empty is not checked (BFCL still runs any calls the model made
   there, so later state checks see them);
3. a turn with ground truth fails when the model made no call in it (`empty_turn_model_response`);
4. state check: every public attribute of every ground-truth instance equals the model's (`!=`);
5. response check: the ground-truth outputs of the turn are a multiset subset of all the model's
   outputs so far, every turn included (a query answered in an earlier turn still counts);
6. an entry is correct when every checked turn passes; a trajectory with fewer or more turns than
   the ground truth was force-terminated and fails.

Unlike bfcl_eval we go on after the first failing turn, so every turn gets a verdict (per-turn
reports and EnvTuning's progress reward need them); an entry's verdict is unchanged by this.
`check_entry` replays a recorded trajectory; the environment uses `TurnChecker` live.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from seetjax.envs.base import TurnVerdict
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask
from seetjax.tools.calls import ToolCall

EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
FORCE_TERMINATED = "multi_turn:force_terminated"
CALLED_IN_NO_CALL_TURN = "multi_turn:irrelevance_error:decoder_success"

# A trajectory: per turn, per step (one assistant message), the calls of that step.
Trajectory = Sequence[Sequence[Sequence[ToolCall]]]


class TurnChecker:
    """Per-turn verdicts for one task; the shadow ground-truth instances advance turn by turn."""

    def __init__(self, task: BfclTask):
        self.task = task
        self._ground_truth = task.new_executor(check_types=False)
        self._next_turn = 0

    @property
    def ground_truth_instances(self) -> dict[str, object]:
        return self._ground_truth.instances

    def verdict(self, turn: int, model_instances: Mapping[str, object],
                model_outputs: Sequence[str], made_calls: bool) -> TurnVerdict:
        """Runs turn `turn`'s ground truth and checks the model's state and outputs after it.

        `model_outputs` are the outputs of all the model's calls so far, every turn included;
        `made_calls` says whether the model made any call in this turn. Turns go in order.
        """
        if turn != self._next_turn:
            raise ValueError(f"turn {turn} checked out of order (expected {self._next_turn})")
        self._next_turn += 1
        expected = self.task.ground_truth[turn]
        expected_outputs = [r.output for r in self._ground_truth.execute_all(expected)]
        if not expected:
            if made_calls:
                return TurnVerdict(turn, False, False, CALLED_IN_NO_CALL_TURN,
                                   "calls were made in a turn that expects none")
            return TurnVerdict(turn, True, False)
        if not made_calls:
            return TurnVerdict(turn, False, True, EMPTY_TURN, f"no call in turn {turn}")
        differences = state_differences(model_instances, self._ground_truth.instances)
        if differences:
            return TurnVerdict(turn, False, True, STATE_MISMATCH,
                               "state differs from the ground truth in " + ", ".join(differences))
        missing = missing_outputs(model_outputs, expected_outputs)
        if missing:
            return TurnVerdict(turn, False, True, RESPONSE_MISMATCH,
                               f"{len(missing)} ground-truth output(s) never produced, e.g. "
                               f"{missing[0][:200]!r}")
        return TurnVerdict(turn, True, True)


def state_differences(model_instances: Mapping[str, object],
                      ground_truth_instances: Mapping[str, object]) -> list[str]:
    """`Class.attribute` for every public attribute of a ground-truth instance the model's differs
    on (bfcl_eval's state check: attributes compared with `!=`)."""
    differences = []
    for class_name, expected in ground_truth_instances.items():
        actual = model_instances[class_name]
        for name, value in vars(expected).items():
            if not name.startswith("_") and getattr(actual, name) != value:
                differences.append(f"{class_name}.{name}")
    return differences


def missing_outputs(model_outputs: Sequence[str], expected_outputs: Sequence[str]) -> list[str]:
    """Expected outputs not matched by the model's, each model output matching at most once
    (bfcl_eval's unordered multiset-subset response check)."""
    available = Counter(model_outputs)
    missing = []
    for output in expected_outputs:
        if available[output] > 0:
            available[output] -= 1
        else:
            missing.append(output)
    return missing


@dataclass(frozen=True)
class EntryResult:
    """An entry's official verdict (`valid`), its per-turn verdicts, why it failed, and its
    checked-turn accuracy (`turn_accuracy`: see `checked_turn_accuracy`)."""

    task_id: str
    category: str
    valid: bool
    verdicts: tuple[TurnVerdict, ...]
    error_type: str | None = None
    message: str = ""
    turn_accuracy: float = 0.0


def checked_turn_accuracy(task: BfclTask, verdicts: Sequence[TurnVerdict]) -> float:
    """The share of `task`'s checked turns (those whose ground truth makes calls) that passed, a
    turn the episode never reached counting as failed: a per-task figure finer than the entry's
    verdict, for paired comparisons of two models on the same tasks. A task without checked
    turns scores 1.0 when every turn was played, else 0.0."""
    checked = [v for v in verdicts if v.checked]
    unreached = [t for t in range(len(verdicts), task.num_turns) if task.ground_truth[t]]
    if not checked and not unreached:
        return float(len(verdicts) >= task.num_turns)
    return sum(v.passed for v in checked) / (len(checked) + len(unreached))


def check_entry(task: BfclTask, trajectory: Trajectory, check_types: bool = False) -> EntryResult:
    """Checks a recorded trajectory of `task` the way bfcl_eval does (see the module docstring).

    Every tool of the involved classes is callable and argument types are not enforced, as in
    bfcl_eval; steps without calls are skipped, as its decoder skips them.
    """
    executor = task.new_executor(check_types=check_types)
    checker = TurnChecker(task)
    outputs: list[str] = []
    verdicts = []
    for turn, steps in enumerate(trajectory[:task.num_turns]):
        made_calls = False
        for calls in steps:
            made_calls |= bool(calls)
            outputs.extend(r.output for r in executor.execute_all(calls))
        verdicts.append(checker.verdict(turn, executor.instances, outputs, made_calls))
    if len(trajectory) != task.num_turns:
        message = (f"the trajectory has {len(trajectory)} turns, the ground truth "
                   f"{task.num_turns}")
        verdicts.extend(TurnVerdict(t, False, bool(task.ground_truth[t]), FORCE_TERMINATED, message)
                        for t in range(len(verdicts), task.num_turns))
        return EntryResult(task.id, task.category, False, tuple(verdicts), FORCE_TERMINATED, message,
                           checked_turn_accuracy(task, verdicts))
    return entry_result(task, verdicts)


def entry_result(task: BfclTask, verdicts: Sequence[TurnVerdict]) -> EntryResult:
    """The entry verdict from its turn verdicts (see `first_failure`)."""
    failure = first_failure(verdicts, task.num_turns)
    accuracy = checked_turn_accuracy(task, verdicts)
    if failure is None:
        return EntryResult(task.id, task.category, True, tuple(verdicts), turn_accuracy=accuracy)
    return EntryResult(task.id, task.category, False, tuple(verdicts), failure.error_type,
                       f"turn {failure.turn}: {failure.message}", accuracy)


def first_failure(verdicts: Sequence[TurnVerdict], num_turns: int) -> TurnVerdict | None:
    """The verdict that fails the entry: the first failed checked turn or force-termination.
    None when every turn was judged, every checked one passed, and nothing was cut short."""
    failure = next((v for v in verdicts if v.checked and not v.passed
                    or v.error_type == FORCE_TERMINATED), None)
    if failure is None and len(verdicts) < num_turns:
        return TurnVerdict(len(verdicts), False, False, FORCE_TERMINATED, "turns never reached")
    return failure


@dataclass(frozen=True)
class BfclReport:
    """Accuracy per category, the multi-turn overall score and per-turn pass rates.

    `overall` is the unweighted mean of the category accuracies, as the BFCL leaderboard computes
    its multi-turn column; it covers the categories present (`complete` says whether all four are).
    """

    accuracy: dict[str, float]
    correct: dict[str, int]
    total: dict[str, int]
    overall: float
    complete: bool
    turn_pass_rate: dict[str, float]


def summarize(results: Iterable[EntryResult]) -> BfclReport:
    correct: dict[str, int] = {}
    total: dict[str, int] = {}
    turns_passed: dict[str, int] = {}
    turns_checked: dict[str, int] = {}
    for result in results:
        c = result.category
        total[c] = total.get(c, 0) + 1
        correct[c] = correct.get(c, 0) + int(result.valid)
        checked = [v for v in result.verdicts if v.checked]
        turns_checked[c] = turns_checked.get(c, 0) + len(checked)
        turns_passed[c] = turns_passed.get(c, 0) + sum(v.passed for v in checked)
    order = [c for c in CATEGORIES if c in total] + sorted(set(total) - set(CATEGORIES))
    accuracy = {c: correct[c] / total[c] for c in order}
    return BfclReport(
        accuracy=accuracy, correct={c: correct[c] for c in order}, total={c: total[c] for c in order},
        overall=sum(accuracy.values()) / len(accuracy) if accuracy else 0.0,
        complete=set(CATEGORIES) <= set(total),
        turn_pass_rate={c: turns_passed[c] / max(turns_checked[c], 1) for c in order})
