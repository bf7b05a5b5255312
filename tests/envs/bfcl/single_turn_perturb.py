"""Ground-truth calls of BFCL single-turn entries and seeded perturbations of them, for checker
parity tests.

A ground truth takes one accepted value per parameter (the first, the last, or one at random; ""
leaves the parameter out). Each perturbation kind models a mistake or a harmless variation: a
wrong value, a changed type (int/float/str/bool/list/tuple swaps), a required parameter left out,
an extra parameter, an optional one left out, a wrong function name, calls reordered, dropped or
repeated, a string written differently (case, spaces, punctuation). Some still pass BFCL's
check, which is the point: both checkers must agree either way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from seetjax.data.single_turn_dialogs import answer_call
from seetjax.envs.bfcl.single_turn import SingleTurnTask
from seetjax.tools.calls import ToolCall


def ground_truth(task: SingleTurnTask, pick: str = "first", rng: random.Random | None = None,
                 underscore_to_dot: bool = False) -> list[ToolCall]:
    """The expected calls with one accepted value per parameter: `pick` "first", "last" or
    "random" (with `rng`)."""
    choose = {"first": lambda accepted: accepted[0], "last": lambda accepted: accepted[-1],
              "random": lambda accepted: rng.choice(accepted)}[pick]
    return [answer_call(answer, underscore_to_dot, choose) for answer in task.answers]


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + " zq"
    if isinstance(value, list):
        return [*value, value[0]] if value else ["zq"]
    if isinstance(value, dict):
        return {**value, "zq": 1}
    return "zq"


def _retyped(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return rng.choice([int(value), str(value)])
    if isinstance(value, int):
        return rng.choice([float(value), str(value), [value]])
    if isinstance(value, float):
        return rng.choice([int(value), str(value)] if value.is_integer() else [str(value)])
    if isinstance(value, str):
        return int(value) if value.isdigit() else rng.choice([[value], None, True])
    if isinstance(value, list):
        return rng.choice([tuple(value), str(value)])
    if isinstance(value, dict):
        return rng.choice([str(value), [value]])
    return 0


def _restyled(text: str, rng: random.Random) -> str:
    return rng.choice([text.upper(), text.replace(" ", ""), text.replace(" ", "-"),
                       f" {text}.", text.replace("'", '"')])


def _with_arg(call: ToolCall, param: str, value: Any) -> ToolCall:
    return ToolCall(call.name, {**call.args, param: value})


def _without_arg(call: ToolCall, param: str) -> ToolCall:
    return ToolCall(call.name, {k: v for k, v in call.args.items() if k != param})


def _value(task, calls, rng):
    sites = [(i, p) for i, c in enumerate(calls) for p in c.args]
    if sites:
        i, p = rng.choice(sites)
        calls[i] = _with_arg(calls[i], p, _wrong(calls[i].args[p]))
    return calls


def _type(task, calls, rng):
    sites = [(i, p) for i, c in enumerate(calls) for p in c.args]
    if sites:
        i, p = rng.choice(sites)
        calls[i] = _with_arg(calls[i], p, _retyped(calls[i].args[p], rng))
    return calls


def _string_form(task, calls, rng):
    sites = [(i, p) for i, c in enumerate(calls) for p, v in c.args.items() if isinstance(v, str)]
    if sites:
        i, p = rng.choice(sites)
        calls[i] = _with_arg(calls[i], p, _restyled(calls[i].args[p], rng))
    return calls


def _docs(task):
    return {d["name"]: d for d in task.docs}


def _missing_required(task, calls, rng):
    docs = _docs(task)
    sites = [(i, p) for i, c in enumerate(calls) for p in c.args
             if p in docs.get(c.name, {}).get("parameters", {}).get("required", ())]
    sites = sites or [(i, p) for i, c in enumerate(calls) for p in c.args]
    if sites:
        i, p = rng.choice(sites)
        calls[i] = _without_arg(calls[i], p)
    return calls


def _drop_optional(task, calls, rng):
    docs = _docs(task)
    sites = [(i, p) for i, c in enumerate(calls) for p in c.args
             if p not in docs.get(c.name, {}).get("parameters", {}).get("required", ())]
    if sites:
        i, p = rng.choice(sites)
        calls[i] = _without_arg(calls[i], p)
    return calls


def _extra(task, calls, rng):
    if not calls:
        return calls
    i = rng.randrange(len(calls))
    doc = _docs(task).get(calls[i].name)
    unused = [p for p in (doc or {}).get("parameters", {}).get("properties", {})
              if p not in calls[i].args]
    if unused and rng.random() < 0.7:
        param = rng.choice(unused)
        accepted = [c for answer in task.answers if answer.name == calls[i].name
                    for c in answer.choices.get(param, ()) if c != ""]
        value = rng.choice(accepted) if accepted and rng.random() < 0.5 else "zq"
    else:
        param, value = "seetjax_extra", 1
    calls[i] = _with_arg(calls[i], param, value)
    return calls


def _name(task, calls, rng):
    if calls:
        i = rng.randrange(len(calls))
        others = [d["name"] for d in task.docs if d["name"] != calls[i].name]
        name = rng.choice(others) if others and rng.random() < 0.7 else calls[i].name + "_v2"
        calls[i] = ToolCall(name, calls[i].args)
    return calls


def _order(task, calls, rng):
    rng.shuffle(calls)
    return calls


def _count(task, calls, rng):
    if calls and rng.random() < 0.5:
        del calls[rng.randrange(len(calls))]
    elif calls:
        calls.insert(rng.randrange(len(calls) + 1), rng.choice(calls))
    return calls


PERTURBATIONS: dict[str, Callable[[SingleTurnTask, list[ToolCall], random.Random],
                                  list[ToolCall]]] = {
    "value": _value, "type": _type, "string_form": _string_form,
    "missing_required": _missing_required, "drop_optional": _drop_optional, "extra": _extra,
    "name": _name, "order": _order, "count": _count,
}


def perturb(task: SingleTurnTask, kind: str, rng: random.Random) -> list[ToolCall]:
    """A ground truth (accepted values picked at random) with one perturbation of `kind`."""
    return PERTURBATIONS[kind](task, ground_truth(task, "random", rng), rng)
