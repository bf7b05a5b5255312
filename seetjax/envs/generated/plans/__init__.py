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
"""

from __future__ import annotations

from seetjax.envs.generated.plans import file_system as fs
from seetjax.envs.generated.plans import math_api as m
from seetjax.envs.generated.plans import messaging as msg
from seetjax.envs.generated.plans import tickets as tk
from seetjax.envs.generated.plans.base import Action, PlanContext, Proposer

__all__ = ["CLASSES", "PROPOSERS", "Action", "PlanContext", "propose"]

# The proposers of each class; a proposer drawn at random that returns None is redrawn.
PROPOSERS: dict[str, tuple[Proposer, ...]] = {
    "GorillaFileSystem": fs.PROPOSERS, "MathAPI": m.PROPOSERS, "MessageAPI": msg.PROPOSERS,
    "TicketAPI": tk.PROPOSERS}

CLASSES = tuple(PROPOSERS)


def propose(class_name: str, ctx: PlanContext) -> Action | None:
    """One action on `class_name` proposed from the live state, or None if the draw found none."""
    return ctx.rng.choice(PROPOSERS[class_name])(ctx)
