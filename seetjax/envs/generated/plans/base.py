"""What every proposer shares: the `Action` it proposes, the `PlanContext` it reads, and small
helpers for calls and slot values."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from seetjax.envs.generated.world import WorldFacts
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ToolExecutor


@dataclass(frozen=True)
class Action:
    """One user intent and the calls that fulfil it; `teaches`: what the model knows once the
    action is in the plan (a token the user told), added to `PlanContext.known`."""

    intent: str
    calls: tuple[ToolCall, ...]
    slots: Mapping[str, str] = field(default_factory=dict)
    missing: str | None = None
    teaches: frozenset[str] = frozenset()


@dataclass
class PlanContext:
    """What proposers read: the live instances, the split's vocabulary and earlier outputs."""

    rng: random.Random
    split: str
    facts: WorldFacts
    executor: ToolExecutor
    initial_config: Mapping[str, Any]
    last_output: dict[str, str] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    intents: set[str] = field(default_factory=set)  # the intents planned so far

    def instance(self, class_name: str) -> Any:
        return self.executor.instances[class_name]


def call(tool: str, /, **args: Any) -> ToolCall:
    return ToolCall(tool, args)


def quoted(value: str) -> str:
    return f"'{value}'"


def listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else items[0]


def words_of(text: str) -> list[str]:
    return [w.strip(".,!?'") for w in text.split() if len(w.strip(".,!?'")) >= 4]


Proposer = Callable[[PlanContext], Action | None]

T = TypeVar("T")


def pick(ctx: PlanContext, items: Sequence[T]) -> T | None:
    """A random item, or None when there is none (the proposer then proposes nothing)."""
    return ctx.rng.choice(items) if items else None


def named(ctx: PlanContext, items: Sequence[T], pool: Iterable[T], *,
          predates: Callable[[T], bool], by_id: Callable[[T], str],
          described: Callable[[T], str]) -> tuple[T, str] | None:
    """One of `items` and how the user names it: `by_id` when it predates the task (its id is in
    the initial state the user knows), else `described` (an order, booking or tweet the plan made:
    its id is only in an earlier output), or nothing when another item of `pool` has the same
    description, which would be ambiguous."""
    item = pick(ctx, items)
    if item is None:
        return None
    if predates(item):
        return item, by_id(item)
    name = described(item)
    if sum(described(other) == name for other in pool) > 1:
        return None
    return item, name


def needs(first: Proposer) -> Callable[[Proposer], Proposer]:
    """Decorator: the request waits for `first` (a login, telling a token) whenever `first`
    proposes something; that action is proposed instead, the request on a later draw."""
    def decorate(propose: Proposer) -> Proposer:
        def wrapped(ctx: PlanContext) -> Action | None:
            return first(ctx) or propose(ctx)
        wrapped.__name__ = propose.__name__
        return wrapped
    return decorate


def password_login(class_name: str, intent: str, tool: str,
                   logged_in: Callable[[Any], bool]) -> Proposer:
    """The login of a class whose login tool takes (username, password), with the credentials
    the user knows (`WorldFacts.credentials`); proposes nothing while `logged_in(instance)`."""
    def propose(ctx: PlanContext) -> Action | None:
        if logged_in(ctx.instance(class_name)):
            return None
        username, password = ctx.facts.credentials[class_name]
        return Action(intent, (call(tool, username=username, password=password),),
                      {"username": quoted(username), "password": quoted(password)})
    propose.__name__ = f"{tool}_when_logged_out"
    return propose


def query(intent: str, tool: str) -> Proposer:
    """A request of one argument-free call (a listing, a status)."""
    def propose(ctx: PlanContext) -> Action | None:
        return Action(intent, (call(tool),))
    propose.__name__ = tool
    return propose
