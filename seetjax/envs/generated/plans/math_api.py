"""Requests on MathAPI: arithmetic on numbers the user gives or on the last result."""

from __future__ import annotations

import json
import random

from seetjax.envs.generated.plans.base import Action, PlanContext, call, listed


def _number(rng: random.Random) -> int | float:
    return rng.randint(2, 500) if rng.random() < 0.6 else round(rng.uniform(1, 500), 2)


_BINARY = ("add", "subtract", "multiply", "divide")


def math_binary(ctx: PlanContext) -> Action | None:
    tool, a, b = ctx.rng.choice(_BINARY), _number(ctx.rng), _number(ctx.rng)
    return Action(f"math.{tool}", (call(tool, a=a, b=b),), {"a": str(a), "b": str(b)}, "b")


def math_chain(ctx: PlanContext) -> Action | None:
    """Continues from the last math result, which the model read in an earlier output."""
    try:
        previous = json.loads(ctx.last_output["MathAPI"])["result"]
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(previous, (int, float)) or isinstance(previous, bool):
        return None
    tool, b = ctx.rng.choice(_BINARY), _number(ctx.rng)
    return Action(f"math.chain_{tool}", (call(tool, a=previous, b=b),), {"b": str(b)}, "b")


_AGGREGATES = ("mean", "sum_values", "max_value", "min_value", "standard_deviation")


def math_aggregate(ctx: PlanContext) -> Action | None:
    tool = ctx.rng.choice(_AGGREGATES)
    numbers = [_number(ctx.rng) for _ in range(ctx.rng.randint(3, 5))]
    return Action(f"math.{tool}", (call(tool, numbers=numbers),),
                  {"numbers": listed([str(n) for n in numbers])}, "numbers")


def math_power(ctx: PlanContext) -> Action | None:
    base, exponent = ctx.rng.randint(2, 30), ctx.rng.randint(2, 4)
    return Action("math.power", (call("power", base=base, exponent=exponent),),
                  {"a": str(base), "b": str(exponent)})


def math_percentage(ctx: PlanContext) -> Action | None:
    whole = ctx.rng.randint(50, 1000)
    part = ctx.rng.randint(1, whole)
    return Action("math.percentage", (call("percentage", part=part, whole=whole),),
                  {"a": str(part), "b": str(whole)})


def math_round(ctx: PlanContext) -> Action | None:
    number, places = round(ctx.rng.uniform(1, 1000), 4), ctx.rng.randint(0, 2)
    return Action("math.round_number",
                  (call("round_number", number=number, decimal_places=places),),
                  {"a": str(number), "b": str(places)})


def math_sqrt(ctx: PlanContext) -> Action | None:
    number, precision = ctx.rng.randint(2, 2000), ctx.rng.randint(2, 6)
    return Action("math.square_root",
                  (call("square_root", number=number, precision=precision),),
                  {"a": str(number), "b": str(precision)})


PROPOSERS = (math_binary, math_binary, math_chain, math_chain, math_aggregate, math_power,
             math_percentage, math_round, math_sqrt)
