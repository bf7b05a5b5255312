"""Requests on TravelAPI: airports, fares, bookings, cards and budget, with the access token.

Every tool that takes an access token needs the model to know it: either the plan authenticated
(the token is in authenticate_travel's output) or the user told it, which a `travel.token` action
does once (the world starts logged in half the time, as BFCL's entries do).
"""

from __future__ import annotations

from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context import (
    BOOKING_RECORD_EXTENSION,
    CREDIT_CARD_EXTENSION,
)

from seetjax.envs.generated import catalog
from seetjax.envs.generated.plans.base import (
    Action,
    PlanContext,
    Proposer,
    call,
    named,
    needs,
    query,
    quoted,
)
from seetjax.envs.generated.vocab import vocab
from seetjax.envs.generated.world import TRAVEL_CLASSES, card_number, date

_TOKEN = "TravelAPI.token"  # in PlanContext.known once the model knows the access token


def _api(ctx: PlanContext) -> Any:
    return ctx.instance("TravelAPI")


def _login(ctx: PlanContext) -> Action | None:
    if _api(ctx).access_token is not None:
        return None
    d = ctx.facts.details["TravelAPI"]
    return Action("travel.login", (call("authenticate_travel", client_id=d["client_id"],
                                        client_secret=d["client_secret"],
                                        refresh_token=d["refresh_token"], grant_type="read_write",
                                        user_first_name=d["first_name"],
                                        user_last_name=d["last_name"]),),
                  {"client_id": quoted(d["client_id"]), "secret": quoted(d["client_secret"]),
                   "refresh_token": quoted(d["refresh_token"]),
                   "name": f"{d['first_name']} {d['last_name']}"},
                  teaches=frozenset({_TOKEN}))


def _tell_token(ctx: PlanContext) -> Action | None:
    """The user, logged in from the start, tells the token (and asks the login status)."""
    if _TOKEN in ctx.known:
        return None
    return Action("travel.token", (call("travel_get_login_status"),),
                  {"token": quoted(_api(ctx).access_token)}, teaches=frozenset({_TOKEN}))


def _with_token(propose: Proposer) -> Proposer:
    """Logs in, or has the user tell the token, before a request that needs it."""
    return needs(_login)(needs(_tell_token)(propose))


def _token(ctx: PlanContext) -> str:
    return _api(ctx).access_token


def _padding(ctx: PlanContext, field: str) -> set[str]:
    """Ids BFCL's long_context padding put in `field` ("credit_card_list", "booking_record"):
    never named by a user turn."""
    if not _api(ctx).long_context:
        return set()
    extension = {"credit_card_list": CREDIT_CARD_EXTENSION,
                 "booking_record": BOOKING_RECORD_EXTENSION}[field]
    return set(extension) - set(ctx.initial_config["TravelAPI"][field])


def _card(ctx: PlanContext) -> tuple[str, str] | None:
    """A card id and how the user names it: by id, or by its last digits if the plan registered
    it (the id is then only in register_credit_card's output)."""
    cards, padding = _api(ctx).credit_card_list, _padding(ctx, "credit_card_list")
    return named(ctx, [c for c in cards if c not in padding], cards,
                 predates=lambda c: c in ctx.initial_config["TravelAPI"]["credit_card_list"],
                 by_id=lambda c: f"card {c}",
                 described=lambda c: f"the card ending in {cards[c]['card_number'][-4:]} I registered")


def _booking(ctx: PlanContext) -> tuple[str, str] | None:
    """A booking id and how the user names it: by id, or by its flight if the plan booked it
    (the id is then only in book_flight's output)."""
    records, padding = _api(ctx).booking_record, _padding(ctx, "booking_record")

    def flight(b: str) -> str:
        r = records[b]
        return f"my {r['travel_from']} to {r['travel_to']} flight on {r['travel_date']}"
    return named(ctx, [b for b in records if b not in padding], records,
                 predates=lambda b: b in ctx.initial_config["TravelAPI"]["booking_record"],
                 by_id=lambda b: f"booking {b}", described=flight)


def travel_airport(ctx: PlanContext) -> Action | None:
    city = ctx.rng.choice(sorted(catalog.airports(ctx.split)))
    return Action("travel.airport", (call("get_nearest_airport_by_city", location=city),),
                  {"city": city}, "city")


def _flight(ctx: PlanContext) -> dict[str, str]:
    origin, destination = ctx.rng.choice(catalog.routes(ctx.split))
    return {"travel_from": origin, "travel_to": destination,
            "travel_date": date(ctx.rng, 2025, 2027),
            "travel_class": ctx.rng.choice(TRAVEL_CLASSES)}


def _flight_slots(flight: dict[str, str]) -> dict[str, str]:
    return {"origin": flight["travel_from"], "destination": flight["travel_to"],
            "date": flight["travel_date"], "class": f"{flight['travel_class']} class"}


def travel_cost(ctx: PlanContext) -> Action | None:
    flight = _flight(ctx)
    return Action("travel.cost", (call("get_flight_cost", **flight),), _flight_slots(flight),
                  "date")


def travel_cost_by_city(ctx: PlanContext) -> Action | None:
    """A fare between two cities: their airport codes come from get_nearest_airport_by_city."""
    flight = _flight(ctx)
    city_of = {code: city for city, code in catalog.airports(ctx.split).items()}
    origin, destination = city_of[flight["travel_from"]], city_of[flight["travel_to"]]
    return Action("travel.cost_by_city",
                  (call("get_nearest_airport_by_city", location=origin),
                   call("get_nearest_airport_by_city", location=destination),
                   call("get_flight_cost", **flight)),
                  {**_flight_slots(flight), "origin": origin, "destination": destination}, "date")


@_with_token
def travel_book(ctx: PlanContext) -> Action | None:
    card = _card(ctx)
    if card is None:
        return None
    (card_id, card_ref), flight = card, _flight(ctx)
    return Action("travel.book", (call("book_flight", access_token=_token(ctx), card_id=card_id,
                                       **flight),),
                  {**_flight_slots(flight), "card": card_ref}, "date")


def _on_booking(intent: str, tool: str) -> Proposer:
    """A request on one booking (tool(access_token, booking_id))."""
    @_with_token
    def propose(ctx: PlanContext) -> Action | None:
        found = _booking(ctx)
        if found is None:
            return None
        booking_id, ref = found
        return Action(intent, (call(tool, access_token=_token(ctx), booking_id=booking_id),),
                      {"ref": ref})
    propose.__name__ = f"travel_{tool}"
    return propose


@_with_token
def travel_register(ctx: PlanContext) -> Action | None:
    d = ctx.facts.details["TravelAPI"]
    number, cvv = card_number(ctx.rng), ctx.rng.randint(100, 999)
    expiry = f"{ctx.rng.randint(1, 12):02d}/{ctx.rng.randint(2026, 2030)}"
    holder = f"{d['first_name']} {d['last_name']}"
    return Action("travel.register",
                  (call("register_credit_card", access_token=_token(ctx), card_number=number,
                        expiration_date=expiry, cardholder_name=holder,
                        card_verification_number=cvv),),
                  {"number": number, "expiry": expiry, "holder": holder, "cvv": str(cvv)}, "expiry")


@_with_token
def travel_balance(ctx: PlanContext) -> Action | None:
    card = _card(ctx)
    if card is None:
        return None
    card_id, ref = card
    return Action("travel.balance", (call("get_credit_card_balance", access_token=_token(ctx),
                                          card_id=card_id),), {"card": ref})


@_with_token
def travel_budget(ctx: PlanContext) -> Action | None:
    limit = ctx.rng.randrange(500, 20000, 100)
    return Action("travel.budget", (call("set_budget_limit", access_token=_token(ctx),
                                         budget_limit=limit),),
                  {"amount": str(limit)}, "amount")


# Currencies compute_exchange_rate converts to and from USD.
_CURRENCIES = ("RMB", "EUR", "JPY", "GBP", "CAD", "AUD", "INR", "RUB", "BRL", "MXN")


@_with_token
def travel_budget_in(ctx: PlanContext) -> Action | None:
    """A budget in another currency: converted to USD first, as BFCL's entries do."""
    currency, value = ctx.rng.choice(_CURRENCIES), ctx.rng.randrange(1000, 50000, 100)
    converted = _api(ctx).compute_exchange_rate(currency, "USD", value)["exchanged_value"]
    return Action("travel.budget_in",
                  (call("compute_exchange_rate", base_currency=currency, target_currency="USD",
                        value=value),
                   call("set_budget_limit", access_token=_token(ctx), budget_limit=converted)),
                  {"amount": str(value), "currency": currency}, "amount")


def travel_exchange(ctx: PlanContext) -> Action | None:
    currency, value = ctx.rng.choice(_CURRENCIES), ctx.rng.randrange(10, 5000, 5)
    base, target = ("USD", currency) if ctx.rng.random() < 0.5 else (currency, "USD")
    return Action("travel.exchange", (call("compute_exchange_rate", base_currency=base,
                                           target_currency=target, value=value),),
                  {"amount": str(value), "base": base, "target": target}, "amount")


_INSURANCE = ("comprehensive", "cancellation", "medical", "baggage")


@_with_token
def travel_insurance(ctx: PlanContext) -> Action | None:
    booking, card = _booking(ctx), _card(ctx)
    if booking is None or card is None:
        return None
    kind, cost = ctx.rng.choice(_INSURANCE), ctx.rng.randrange(20, 400, 5)
    return Action("travel.insurance",
                  (call("purchase_insurance", access_token=_token(ctx), insurance_type=kind,
                        booking_id=booking[0], insurance_cost=cost, card_id=card[0]),),
                  {"kind": kind, "ref": booking[1], "cost": str(cost), "card": card[1]})


def travel_support(ctx: PlanContext) -> Action | None:
    found = _booking(ctx)
    if found is None:
        return None
    message = ctx.rng.choice(vocab("support", ctx.split))
    return Action("travel.support", (call("contact_customer_support", booking_id=found[0],
                                          message=message),),
                  {"ref": found[1], "message": quoted(message)}, "message")


def travel_verify(ctx: PlanContext) -> Action | None:
    """Checks the logged-in traveller's passport (BFCL's check: adult, US passport)."""
    api = _api(ctx)
    if api.user_first_name is None:
        return None
    birth = date(ctx.rng, 1950, 2000)
    passport = f"US{ctx.rng.randint(10**6, 10**7 - 1)}"
    return Action("travel.verify", (call("verify_traveler_information",
                                         first_name=api.user_first_name,
                                         last_name=api.user_last_name, date_of_birth=birth,
                                         passport_number=passport),),
                  {"name": f"{api.user_first_name} {api.user_last_name}", "birth": birth,
                   "passport": passport}, "passport")


@_with_token
def travel_history(ctx: PlanContext) -> Action | None:
    return Action("travel.history", (call("get_booking_history", access_token=_token(ctx)),))


PROPOSERS = (travel_airport, travel_cost, travel_cost_by_city, travel_book, travel_book,
             _on_booking("travel.cancel", "cancel_booking"),
             _on_booking("travel.invoice", "retrieve_invoice"),
             travel_register, travel_balance, travel_budget, travel_budget_in, travel_exchange,
             travel_insurance, travel_support, travel_verify,
             travel_history, query("travel.cards", "get_all_credit_cards"),
             query("travel.airports", "list_all_airports"),
             query("travel.login_status", "travel_get_login_status"),
             query("travel.fiscal_year", "get_budget_fiscal_year"))
