"""Per-step shaping rewards from step codes.

Each assistant message gets the value of its `StepCode`, plus the value of the turn verdict it
produced, plus a timeout value if it ended the episode early: force-terminated by the environment,
or the last message of an episode the rollout cut off when its context was full
(`EpisodeTrace.truncated`). With `reward.kind="shaped"` (`seetjax.rewards.kinds`) the rollout
places each on the last generated token of its message, and the advantage estimators credit it to
the tokens up to there (step-level credit assignment); their sum is the episode's return.
Defaults follow the order of EnvTuning's codes: a format error is worse than a failed call, which
is worse than a clean one; a passed turn is the only positive signal.

Per-call penalties alone make silence the safest policy: a turn that expects calls and gets none
fails at no cost, while every failed attempt costs more. Over a longer RL phase on the testbed the
policy learned exactly that (README, "Ablations": "Why the shaped reward changed"). So a turn that
expected calls and failed without progress toward its ground truth (`seetjax.rewards.gaming`:
silent, or whose calls reached none of the ground truth's arguments) costs `unattempted_turn`,
and it scores as one plain answer that gave up, whatever its messages were: `no_call +
turn_failed + unattempted_turn` on the message that ended it, its other messages 0. A harmless
call therefore earns nothing over silence (before 2026-11-27 only silent turns paid the cost, so a
failed turn with one clean listing scored 0, above silence and above a real attempt with one
failed call). One turn's step-code penalties never sum below `turn_penalty_floor`: while
`unattempted_turn` is at most the floor (the defaults: both -0.5), an attempt that made progress
never scores below silence, and nothing that made none scores above it, unless the attempt runs
into BFCL's step limit or the context's end, whose `timeout` comes on top. Code values are
charges (<= 0): a positive one would pay for activity, a harmless call repeated.

Repeats and message counts (2026-11-27, the demo's seed 0 after RL: `ls()` x6, the withheld
function x13 in a miss_func task's turn without ground truth). Once a turn's charges reach the
floor, more calls cost nothing; and under GRPO's process supervision (`seetjax.losses.advantages`)
every reward of a group is centred on the mean of the group's rewards, so with one reward per
message a message worth 0 in a group whose mean is negative adds -mean/std to the advantage of
every token before it (+0.24 on the demo's traces): more messages earned more. So each call that
repeats one made earlier in its turn (`seetjax.rewards.gaming.repeated_calls`) costs
`repeated_call`, outside the floor (the floor protects attempts; a repeat attempts nothing new), in
every turn whose code values are charged, those without ground truth too; and with `per_turn` a
turn's values go on the message that ends it, as one reward (`placed_rewards`), so every row of a
task marks one reward per turn reached, however many messages it took. An attempt that made
progress without repeating a call never scores below silence; a passed turn padded with repeats
scores below the same turn unpadded.

`no_progress_as_silence=False` is the reward before 2026-11-27 as a whole: every message's code
value charged, `unattempted_turn` on silent turns only, no repeat charge, one reward per message.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from seetjax.envs.base import EpisodeTrace, StepCode
from seetjax.errors import invalid
from seetjax.rewards.gaming import repeated_calls, unproductive_turns


@dataclass(frozen=True)
class ShapingConfig:
    format_error: float = -0.5
    execution_error: float = -0.2
    clean_call: float = 0.0
    no_call: float = 0.0
    turn_passed: float = 1.0
    turn_failed: float = 0.0
    unattempted_turn: float = -0.5  # a checked turn that failed without progress (or call)
    turn_penalty_floor: float = -0.5  # one turn's negative code values sum to no less (-inf: none)
    timeout: float = -1.0
    repeated_call: float = -0.1  # each call repeating one made earlier in its turn (not floored)
    per_turn: bool = True  # a turn's values as one reward on the message that ends it
    no_progress_as_silence: bool = True  # False: the whole reward before 2026-11-27 (docstring)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("per_turn", "no_progress_as_silence"):
                if not isinstance(value, bool):
                    raise invalid(self, f.name, value, "must be a bool")
                continue
            unbounded = f.name == "turn_penalty_floor" and value == -math.inf
            if not isinstance(value, (int, float)) or not (math.isfinite(value) or unbounded):
                raise invalid(self, f.name, value, "must be a finite number")
        if self.turn_penalty_floor > 0:
            raise invalid(self, "turn_penalty_floor", self.turn_penalty_floor, "must be <= 0")
        for name in ("format_error", "execution_error", "clean_call", "no_call", "repeated_call"):
            if getattr(self, name) > 0:
                raise invalid(self, name, getattr(self, name), "must be <= 0: a positive code "
                                 "value pays for activity (a harmless call, repeated)")

    def code_value(self, code: StepCode) -> float:
        return {StepCode.FORMAT_ERROR: self.format_error,
                StepCode.EXECUTION_ERROR: self.execution_error,
                StepCode.CLEAN_CALL: self.clean_call, StepCode.NO_CALL: self.no_call}[code]


def step_rewards(trace: EpisodeTrace, config: ShapingConfig | None = None) -> list[float]:
    """One shaping reward per environment step (`trace.steps`, each reading one assistant
    message), in order."""
    config = config or ShapingConfig()
    rewards = []
    last = len(trace.steps) - 1
    as_silence = config.no_progress_as_silence
    charged = unproductive_turns(trace) if as_silence else trace.unattempted_turns()
    repeats = repeated_calls(trace) if as_silence else [0] * len(trace.steps)
    penalty = 0.0  # the current turn's error penalties so far
    for i, step in enumerate(trace.steps):
        given_up = as_silence and step.turn in charged
        if given_up:  # scored as one plain answer that gave up
            value = config.no_call if step.turn_ended else 0.0
        else:
            value = config.code_value(step.code)
        if value < 0:  # later penalties shrink to keep the turn's sum at or above the floor
            value = max(value, config.turn_penalty_floor - penalty)
            penalty += value
        if not given_up:
            value += config.repeated_call * repeats[i]
        # Only the turn the message itself ended is judged here; the turns a timeout skipped are
        # covered by the timeout value.
        for verdict in step.verdicts[:1]:
            value += config.turn_passed if verdict.passed else config.turn_failed
            value += config.unattempted_turn * (verdict.turn in charged)
        if step.turn_ended:
            penalty = 0.0
        if step.timeout or (trace.truncated and i == last):
            value += config.timeout
        rewards.append(value)
    return rewards


def placed_rewards(trace: EpisodeTrace, config: ShapingConfig | None = None
                   ) -> list[tuple[int, float]]:
    """`step_rewards` as (step, reward) pairs, their sum the episode's return. With `per_turn`
    (and `no_progress_as_silence`), one per turn: the turn's values summed on the step that ended
    it (the steps after the last turn ended, of an episode cut off, on its last step); else one
    per step."""
    config = config or ShapingConfig()
    rewards = step_rewards(trace, config)
    if not (config.per_turn and config.no_progress_as_silence):
        return list(enumerate(rewards))
    placed, total = [], 0.0
    for i, (step, value) in enumerate(zip(trace.steps, rewards)):
        total += value
        if step.turn_ended or i == len(rewards) - 1:
            placed.append((i, total))
            total = 0.0
    return placed
