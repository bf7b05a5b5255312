"""Deterministic perturbations of ground-truth trajectories, for checker parity tests.

Each kind models a mistake a policy makes: a dropped, extra, reordered or renamed call, a changed
argument, a call made in a turn that expects none, a call made a turn early or late, a turn left
empty, an episode cut short. Some perturbations still pass BFCL's check (an extra read-only call,
a harmless reorder), which is the point: both checkers must agree either way.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from seetjax.envs.bfcl.data import BfclTask
from seetjax.tools.calls import ToolCall

Trajectory = list[list[list[ToolCall]]]


def ground_truth_trajectory(task: BfclTask, rng: random.Random | None = None) -> Trajectory:
    """The ground truth as a trajectory: each turn's calls in one step, or (with `rng`) split
    into several steps at random points."""
    trajectory = []
    for calls in task.ground_truth:
        calls = list(calls)
        if not calls:
            trajectory.append([])
        elif rng is None or len(calls) == 1:
            trajectory.append([calls])
        else:
            cut = rng.randrange(1, len(calls))
            trajectory.append([calls[:cut], calls[cut:]])
    return trajectory


def _flat(trajectory: Trajectory) -> list[list[ToolCall]]:
    return [[c for step in turn for c in step] for turn in trajectory]


def _pack(turns: list[list[ToolCall]]) -> Trajectory:
    return [[calls] if calls else [] for calls in turns]


def _call_sites(turns: list[list[ToolCall]]) -> list[tuple[int, int]]:
    return [(t, i) for t, calls in enumerate(turns) for i in range(len(calls))]


def _drop(task, turns, rng):
    t, i = rng.choice(_call_sites(turns))
    del turns[t][i]
    return turns


def _extra(task, turns, rng):
    t, _ = rng.choice(_call_sites(turns))
    pool = [c for calls in task.ground_truth for c in calls]
    readonly = [n for n in ("pwd", "ls", "ticket_get_login_status", "displayCarStatus")
                if n in task.schemas]
    if readonly and rng.random() < 0.4:
        name = rng.choice(readonly)
        extra = ToolCall(name, {"option": "fuel"} if name == "displayCarStatus" else {})
    else:
        extra = rng.choice(pool)
    turns[t].insert(rng.randrange(len(turns[t]) + 1), extra)
    return turns


def _reorder(task, turns, rng):
    multi = [t for t, calls in enumerate(turns) if len(calls) > 1]
    if not multi:
        return _drop(task, turns, rng)
    t = rng.choice(multi)
    rng.shuffle(turns[t])
    return turns


def _rename(task, turns, rng):
    t, i = rng.choice(_call_sites(turns))
    call = turns[t][i]
    same_params = [s.name for s in task.schemas.values()
                   if s.name != call.name and set(call.args) <= set(s.param_names)]
    name = rng.choice(same_params) if same_params and rng.random() < 0.7 else call.name + "_v2"
    turns[t][i] = ToolCall(name, dict(call.args))
    return turns


def _change_argument(task, turns, rng):
    sites = [(t, i) for t, i in _call_sites(turns) if turns[t][i].args]
    if not sites:
        return _drop(task, turns, rng)
    t, i = rng.choice(sites)
    call = turns[t][i]
    key = rng.choice(sorted(call.args))
    value = call.args[key]
    if isinstance(value, bool):
        value = not value
    elif isinstance(value, (int, float)):
        value = value + rng.choice([1, 2, 10])
    elif isinstance(value, str):
        value = rng.choice([value + "_x", value.upper(), "", value[:-1]])
    elif isinstance(value, list):
        value = value[:-1] if value else ["x"]
    else:
        value = {}
    turns[t][i] = ToolCall(call.name, {**call.args, key: value})
    return turns


def _call_in_no_call_turn(task, turns, rng):
    empty = [t for t, calls in enumerate(turns) if not task.ground_truth[t]]
    if not empty:
        return _move(task, turns, rng)
    t = rng.choice(empty)
    later = [c for calls in task.ground_truth[t + 1:] for c in calls]
    pool = later or [c for calls in task.ground_truth for c in calls]
    turns[t].append(rng.choice(pool))
    return turns


def _move(task, turns, rng):
    t, i = rng.choice(_call_sites(turns))
    target = t + rng.choice([-1, 1])
    if not 0 <= target < len(turns):
        target = t - 1 if t > 0 else t + 1
    if not 0 <= target < len(turns):
        return _drop(task, turns, rng)
    turns[target].append(turns[t].pop(i))
    return turns


def _empty_turn(task, turns, rng):
    t = rng.choice([t for t, calls in enumerate(turns) if calls])
    turns[t] = []
    return turns


KINDS: dict[str, Callable] = {
    "drop": _drop, "extra": _extra, "reorder": _reorder, "rename": _rename,
    "change_argument": _change_argument, "call_in_no_call_turn": _call_in_no_call_turn,
    "move": _move, "empty_turn": _empty_turn,
}


def perturb(task: BfclTask, kind: str, rng: random.Random) -> Trajectory:
    """A perturbed copy of `task`'s ground truth; kind `truncate` cuts off the last turn."""
    turns = _flat(ground_truth_trajectory(task))
    if kind == "truncate":
        return _pack(turns[:-1])
    return _pack(KINDS[kind](task, turns, rng))
