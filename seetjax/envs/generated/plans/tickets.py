"""Requests on TicketAPI, naming earlier tickets by title and logging in when needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seetjax.envs.generated.plans.base import (
    Action,
    PlanContext,
    call,
    needs,
    password_login,
    quoted,
)
from seetjax.envs.generated.vocab import vocab

_ticket_login = password_login("TicketAPI", "ticket.login", "ticket_login",
                               lambda api: bool(api.current_user))

# Proposes the login first when the user is not logged in to the ticket system.
_ticket_logged_in = needs(_ticket_login)


def _ticket(ctx: PlanContext, allowed: Callable[[dict[str, Any]], bool]
            ) -> tuple[dict[str, Any], str] | None:
    """A ticket and how the user names it: by id, or by title when the plan created it (the id
    is then only in the create_ticket output of an earlier step)."""
    queue = [t for t in ctx.instance("TicketAPI").ticket_queue if allowed(t)]
    if not queue:
        return None
    ticket = ctx.rng.choice(queue)
    created = ticket["id"] >= ctx.initial_config["TicketAPI"]["ticket_counter"]
    return ticket, (f"the {ticket['title']!r} ticket I opened" if created
                    else f"ticket {ticket['id']}")


@_ticket_logged_in
def ticket_create(ctx: PlanContext) -> Action | None:
    titles = {t["title"] for t in ctx.instance("TicketAPI").ticket_queue}
    fresh = [t for t in vocab("title", ctx.split) if t not in titles]
    if not fresh:
        return None
    title = ctx.rng.choice(fresh)
    description = ctx.rng.choice(vocab("description", ctx.split))
    priority = ctx.rng.randint(1, 5)
    return Action("ticket.create", (call("create_ticket", title=title, description=description,
                                          priority=priority),),
                  {"title": quoted(title), "description": quoted(description), "priority": str(priority)},
                  "title")


def ticket_get(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: True)
    if found is None:
        return None
    ticket, ref = found
    return Action("ticket.get", (call("get_ticket", ticket_id=ticket["id"]),), {"ref": ref})


def ticket_close(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: t["status"] != "Closed")
    if found is None:
        return None
    ticket, ref = found
    return Action("ticket.close", (call("close_ticket", ticket_id=ticket["id"]),), {"ref": ref})


def ticket_resolve(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: t["status"] != "Resolved")
    if found is None:
        return None
    ticket, ref = found
    resolution = ctx.rng.choice(vocab("resolution", ctx.split))
    return Action("ticket.resolve",
                  (call("resolve_ticket", ticket_id=ticket["id"], resolution=resolution),),
                  {"ref": ref, "resolution": quoted(resolution)}, "resolution")


def ticket_priority(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: True)
    if found is None:
        return None
    ticket, ref = found
    priority = ctx.rng.choice([p for p in range(1, 6) if p != ticket.get("priority")])
    return Action("ticket.priority",
                  (call("edit_ticket", ticket_id=ticket["id"], updates={"priority": priority}),),
                  {"ref": ref, "priority": str(priority)}, "priority")


@_ticket_logged_in
def ticket_list(ctx: PlanContext) -> Action | None:
    status = ctx.rng.choice(["Open", "Closed", "Resolved"])
    return Action("ticket.list", (call("get_user_tickets", status=status),),
                  {"status": status.lower()})


PROPOSERS = (ticket_create, ticket_create, ticket_get, ticket_close, ticket_resolve,
             ticket_priority, ticket_list)
