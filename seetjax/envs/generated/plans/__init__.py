"""Call plans: user intents per API class, proposed from the LIVE state of an episode's instances.

A proposer looks at the instances as the plan has left them so far (the current folder and its
files, who is logged in, which tickets exist, the last math result) and proposes one `Action`: an
intent (the key of its paraphrase templates), the calls that fulfil it, and the slot values the
user text must mention so the calls can be inferred. The generator executes the calls on a copy of
the instances and keeps the action only if every call succeeds, so ground truth is correct by
construction, and later actions build on earlier ones (a file created in turn 1 is moved in
turn 2, a ticket opened earlier is closed, a result is divided further).

`missing` names the slot a miss_param turn may leave out of the user text (its value is supplied
on the next turn); actions without one never become miss_param turns.

Classes combine as BFCL's entries combine them: each of its multi-class entries pairs one domain
class (`DOMAIN_CLASSES`: file system, trading, travel, vehicle) with a helper (math, messaging,
tickets, posting), every such pair occurs, and two domains never meet. `plausible` allows any
set with at most one domain class: BFCL's pairs, and the helper pairs this generator always drew.
"""

from __future__ import annotations

from collections.abc import Iterable

from seetjax.envs.generated.plans import file_system as fs
from seetjax.envs.generated.plans import math_api as m
from seetjax.envs.generated.plans import messaging as msg
from seetjax.envs.generated.plans import tickets as tk
from seetjax.envs.generated.plans import trading as trade
from seetjax.envs.generated.plans import travel
from seetjax.envs.generated.plans import twitter as tw
from seetjax.envs.generated.plans import vehicle as car
from seetjax.envs.generated.plans.base import Action, PlanContext, Proposer

__all__ = ["CLASSES", "DOMAIN_CLASSES", "PROPOSERS", "Action", "PlanContext", "plausible",
           "propose"]

# The proposers of each class; a proposer drawn at random that returns None is redrawn.
PROPOSERS: dict[str, tuple[Proposer, ...]] = {
    "GorillaFileSystem": fs.PROPOSERS, "MathAPI": m.PROPOSERS, "MessageAPI": msg.PROPOSERS,
    "TicketAPI": tk.PROPOSERS, "TradingBot": trade.PROPOSERS, "TravelAPI": travel.PROPOSERS,
    "VehicleControlAPI": car.PROPOSERS, "TwitterAPI": tw.PROPOSERS}

CLASSES = tuple(PROPOSERS)

DOMAIN_CLASSES = frozenset({"GorillaFileSystem", "TradingBot", "TravelAPI", "VehicleControlAPI"})


def plausible(classes: Iterable[str]) -> bool:
    """Whether a task may use these classes together: at most one domain class."""
    return len(DOMAIN_CLASSES.intersection(classes)) <= 1


def propose(class_name: str, ctx: PlanContext) -> Action | None:
    """One action on `class_name` proposed from the live state, or None if the draw found none."""
    return ctx.rng.choice(PROPOSERS[class_name])(ctx)
