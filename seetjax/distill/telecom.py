"""A telecom customer-support backend and its scenario family (`telecom`).

`TelecomAPI` is a small simulated carrier: accounts on plans, monthly data usage and packs,
roaming, balances, regional outages and support tickets. Every tool is a pure state transition on
the instance (no clock, no randomness) with a JSON schema in `DOCS`, so an episode replays exactly
and BFCL's checker compares the final state with the ground truth's.

A scenario is a customer with one to three user turns drawn from intents (usage, data packs,
roaming, plan changes, outages, balances). Each turn's ground truth is planned on a live instance
as it is drawn, so later turns see earlier effects (a data pack bought in turn 1 is owed in turn 2).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from seetjax.distill.config import ScenarioSpec
from seetjax.distill.scenarios import Family, ScenarioTemplate, register_family
from seetjax.distill.simulated import Backend, SimulatedTask, simulated_task
from seetjax.errors import invalid
from seetjax.tools.calls import ToolCall

PACK_PRICE_PER_GB = 5.0
PACK_SIZES = (1, 2, 5, 10)
ISSUE_TYPES = ("no_signal", "slow_data", "billing")
PLANS = {
    "basic_5": {"name": "Basic 5", "monthly_fee": 15.0, "data_gb": 5, "roaming_included": False},
    "plus_20": {"name": "Plus 20", "monthly_fee": 30.0, "data_gb": 20,
                "roaming_included": False},
    "travel_15": {"name": "Travel 15", "monthly_fee": 40.0, "data_gb": 15,
                  "roaming_included": True},
    "unlimited": {"name": "Unlimited", "monthly_fee": 55.0, "data_gb": 1000,
                  "roaming_included": True},
}
REGIONS = ("Northgate", "Riverside", "Old Town", "Harbor", "Westfield", "Lakeshore", "Hillcrest",
           "Eastbrook")
FIRST_NAMES = ("Amara", "Bjorn", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo",
               "Jun", "Kaia", "Luca", "Mina", "Noor", "Otto", "Priya")


class TelecomAPI:
    """A carrier's customer-support backend (see the module docstring)."""

    def __init__(self):
        self.accounts: dict[str, dict[str, Any]] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.outages: dict[str, dict[str, Any]] = {}
        self.tickets: list[dict[str, Any]] = []

    def _load_scenario(self, scenario: dict[str, Any], long_context: bool = False) -> None:
        self.accounts = scenario.get("accounts", {})
        self.plans = scenario.get("plans", {})
        self.outages = scenario.get("outages", {})
        self.tickets = scenario.get("tickets", [])

    def _account(self, phone_number: str) -> dict[str, Any] | None:
        return self.accounts.get(phone_number)

    def get_account(self, phone_number: str) -> dict[str, Any]:
        """The account of a phone number: holder, plan, balance owed, roaming and region."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        return {"phone_number": phone_number, "name": account["name"],
                "plan_id": account["plan_id"], "balance": account["balance"],
                "roaming": account["roaming"], "region": account["region"]}

    def list_plans(self) -> dict[str, Any]:
        """Every plan on offer, by plan id."""
        return {"plans": self.plans}

    def change_plan(self, phone_number: str, plan_id: str) -> dict[str, Any]:
        """Moves an account to another plan."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        if plan_id not in self.plans:
            return {"error": f"no plan {plan_id!r}; see list_plans"}
        if account["plan_id"] == plan_id:
            return {"error": f"{phone_number} is already on {plan_id}"}
        account["plan_id"] = plan_id
        return {"phone_number": phone_number, "plan_id": plan_id}

    def get_data_usage(self, phone_number: str) -> dict[str, Any]:
        """This month's data: used, allowance (plan plus packs) and remaining, in GB."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        allowance = self.plans[account["plan_id"]]["data_gb"] + account["extra_data_gb"]
        used = account["data_used_gb"]
        return {"used_gb": used, "allowance_gb": allowance,
                "remaining_gb": round(max(allowance - used, 0.0), 2)}

    def add_data_pack(self, phone_number: str, gigabytes: int) -> dict[str, Any]:
        """Adds a data pack of 1, 2, 5 or 10 GB for this month, charged to the balance."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        if gigabytes not in PACK_SIZES:
            return {"error": f"packs are {list(PACK_SIZES)} GB, not {gigabytes}"}
        account["extra_data_gb"] += gigabytes
        account["balance"] = round(account["balance"] + gigabytes * PACK_PRICE_PER_GB, 2)
        return {"phone_number": phone_number, "extra_data_gb": account["extra_data_gb"],
                "balance": account["balance"]}

    def set_roaming(self, phone_number: str, enabled: bool) -> dict[str, Any]:
        """Turns international roaming on or off."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        account["roaming"] = bool(enabled)
        return {"phone_number": phone_number, "roaming": account["roaming"]}

    def check_outage(self, region: str) -> dict[str, Any]:
        """Whether the network has an outage in a region, and its expected repair time."""
        outage = self.outages.get(region)
        if outage is None:
            return {"region": region, "outage": False}
        return {"region": region, "outage": True, "eta_hours": outage["eta_hours"]}

    def open_ticket(self, phone_number: str, issue_type: str) -> dict[str, Any]:
        """Opens a support ticket for an account: issue_type no_signal, slow_data or billing."""
        if self._account(phone_number) is None:
            return {"error": f"no account for {phone_number}"}
        if issue_type not in ISSUE_TYPES:
            return {"error": f"issue_type is one of {list(ISSUE_TYPES)}, not {issue_type!r}"}
        ticket = {"ticket_id": len(self.tickets) + 1, "phone_number": phone_number,
                  "issue_type": issue_type, "status": "open"}
        self.tickets.append(ticket)
        return dict(ticket)

    def pay_balance(self, phone_number: str, amount: float) -> dict[str, Any]:
        """Pays an amount towards the balance owed (no more than is owed)."""
        account = self._account(phone_number)
        if account is None:
            return {"error": f"no account for {phone_number}"}
        if not 0 < amount <= account["balance"] + 1e-9:
            return {"error": f"amount must be in (0, {account['balance']}]"}
        account["balance"] = round(account["balance"] - amount, 2)
        return {"phone_number": phone_number, "balance": account["balance"]}


_PHONE = {"phone_number": {"type": "string", "description": "The account's phone number, "
                                                            "e.g. '+1-555-0100'."}}


def _doc(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    properties = properties or {}
    return {"name": name, "description": f"Telecom support tool. {description}",
            "parameters": {"type": "dict", "properties": properties,
                           "required": list(properties)}}


DOCS: tuple[dict[str, Any], ...] = (
    _doc("get_account", "The account of a phone number: holder, plan id, balance owed, roaming "
         "status and home region.", _PHONE),
    _doc("list_plans", "Every plan on offer by plan id: name, monthly fee, data allowance in GB "
         "and whether roaming is included."),
    _doc("change_plan", "Moves an account to another plan.",
         {**_PHONE, "plan_id": {"type": "string", "description": "A plan id from list_plans."}}),
    _doc("get_data_usage", "This month's data in GB: used, allowance and remaining.", _PHONE),
    _doc("add_data_pack", f"Adds a data pack for this month, {PACK_PRICE_PER_GB:g} per GB, "
         "charged to the balance.",
         {**_PHONE, "gigabytes": {"type": "integer", "description": "Pack size: 1, 2, 5 or 10."}}),
    _doc("set_roaming", "Turns international roaming on or off.",
         {**_PHONE, "enabled": {"type": "boolean", "description": "True to turn roaming on."}}),
    _doc("check_outage", "Whether a region has a network outage, and the expected repair time.",
         {"region": {"type": "string", "description": "The region's name, e.g. 'Harbor'."}}),
    _doc("open_ticket", "Opens a support ticket for an account.",
         {**_PHONE, "issue_type": {"type": "string",
                                   "description": "One of no_signal, slow_data, billing."}}),
    _doc("pay_balance", "Pays an amount towards the balance owed.",
         {**_PHONE, "amount": {"type": "number", "description": "The amount to pay."}}),
)
BACKEND = Backend("TelecomAPI", TelecomAPI, DOCS)


def _state(rng: random.Random, customers: int) -> dict[str, Any]:
    accounts = {}
    for k in range(customers):
        phone = f"+1-555-{rng.randrange(100, 1000):03d}{k}"
        plan = rng.choice(sorted(PLANS))
        accounts[phone] = {
            "name": rng.choice(FIRST_NAMES), "plan_id": plan, "status": "active",
            "balance": float(rng.choice((0, 12, 25, 40, 57.5))), "roaming": rng.random() < 0.3,
            "data_used_gb": round(rng.uniform(0.5, PLANS[plan]["data_gb"] * 1.1
                                              if PLANS[plan]["data_gb"] < 100 else 60), 1),
            "extra_data_gb": 0, "region": rng.choice(REGIONS)}
    outages = {region: {"eta_hours": rng.choice((2, 4, 8, 24))}
               for region in rng.sample(REGIONS, 2)}
    return {"accounts": accounts, "plans": {k: dict(v) for k, v in PLANS.items()},
            "outages": outages, "tickets": []}


# An intent proposes (user text, ground-truth calls) from the live state, or None if it does not
# apply to this customer now.
Intent = Callable[[random.Random, TelecomAPI, str], "tuple[str, list[ToolCall]] | None"]


def _usage(rng, api, phone):
    return (rng.choice(("How much data have I used this month on {p}?",
                        "Can you check my data usage for {p}?")).format(p=phone),
            [ToolCall("get_data_usage", {"phone_number": phone})])


def _pack(rng, api, phone):
    size = rng.choice(PACK_SIZES)
    return (rng.choice(("Please add a {n} GB data pack to {p}.",
                        "I'm running low on data: top up {p} with {n} GB.")).format(n=size, p=phone),
            [ToolCall("add_data_pack", {"phone_number": phone, "gigabytes": size})])


def _roaming(rng, api, phone):
    if api.accounts[phone]["roaming"]:
        return (f"I'm back home, please switch roaming off on {phone}.",
                [ToolCall("set_roaming", {"phone_number": phone, "enabled": False})])
    return (rng.choice(("I'm flying abroad tomorrow: turn on roaming for {p}.",
                        "Enable international roaming on {p}, please.")).format(p=phone),
            [ToolCall("set_roaming", {"phone_number": phone, "enabled": True})])


def _plan(rng, api, phone):
    current = api.accounts[phone]["plan_id"]
    target = rng.choice(sorted(set(PLANS) - {current}))
    return (f"Move {phone} to the {PLANS[target]['name']} plan.",
            [ToolCall("list_plans"), ToolCall("change_plan", {"phone_number": phone,
                                                              "plan_id": target})])


def _outage(rng, api, phone):
    region = api.accounts[phone]["region"]
    calls = [ToolCall("check_outage", {"region": region})]
    if region in api.outages:
        calls.append(ToolCall("open_ticket", {"phone_number": phone, "issue_type": "no_signal"}))
    return (f"I have no signal at home in {region}. Is there an outage? If there is, open a "
            f"no-signal ticket for {phone}.", calls)


def _pay(rng, api, phone):
    balance = api.accounts[phone]["balance"]
    if balance <= 0:
        return None
    return (f"What do I owe on {phone}? Pay it all off.",
            [ToolCall("get_account", {"phone_number": phone}),
             ToolCall("pay_balance", {"phone_number": phone, "amount": balance})])


INTENTS: dict[str, Intent] = {"usage": _usage, "data_pack": _pack, "roaming": _roaming,
                              "plan_change": _plan, "outage": _outage, "pay": _pay}
# (turns, intents per turn, customers in the state) per difficulty
_SHAPE = {"easy": ((1, 1), 1, 2), "medium": ((1, 2), 1, 4), "hard": ((2, 3), 2, 8)}


def telecom_task(index: int, seed: int, difficulty: str,
                 intents: tuple[str, ...] = tuple(INTENTS)) -> SimulatedTask:
    """Scenario `index` of the telecom stream fixed by (seed, difficulty, intents)."""
    rng = random.Random(f"seetjax-telecom:{seed}:{difficulty}:{','.join(intents)}:{index}")
    (low, high), per_turn, customers = _SHAPE[difficulty]
    state = _state(rng, customers)
    live = BACKEND.new_instance(state)
    phone = rng.choice(sorted(state["accounts"]))
    turns, ground_truth = [], []
    unused = list(intents)  # each intent once before any repeats
    for _ in range(rng.randint(low, high)):
        texts, calls = [], []
        if len(unused) < per_turn:
            unused = list(intents)
        chosen = rng.sample(unused, min(per_turn, len(unused)))
        unused = [i for i in unused if i not in chosen]
        for name in chosen:
            proposed = INTENTS[name](rng, live, phone)
            if proposed is None:
                continue
            text, planned = proposed
            for call in planned:  # planned on the live state: later turns see the effects
                result = getattr(live, call.name)(**call.args)
                if isinstance(result, dict) and "error" in result:
                    raise RuntimeError(f"telecom plan {name}: {call} failed: {result['error']}")
            texts.append(text)
            calls.extend(planned)
        if not texts:
            texts, calls = [_usage(rng, live, phone)[0]], [ToolCall("get_data_usage",
                                                                    {"phone_number": phone})]
        turns.append(" ".join(texts))
        ground_truth.append(calls)
    return simulated_task(f"telecom_{seed}_{difficulty}_{index}", BACKEND, state, turns,
                          ground_truth)


@register_family("telecom")
class TelecomFamily(Family):
    """Customer support at a carrier (the simulated backend above). Pinned params: `intents`
    (a subset of INTENTS)."""

    params = ("intents",)
    template = ScenarioTemplate(
        family="telecom",
        goal="Resolve the customer's requests about their mobile account: data usage and packs, "
             "roaming, plan changes, outages and payments.",
        assumptions=("The carrier's support backend; accounts are keyed by phone number.",
                     "Prices and allowances come from the tools, never from memory; tickets are "
                     "opened only when the tools show a problem."),
        tools=DOCS)

    def check(self, spec: ScenarioSpec) -> None:
        super().check(spec)
        intents = spec.params.get("intents", list(INTENTS))
        if not intents or set(intents) - set(INTENTS):
            raise invalid(spec, "params['intents']", intents,
                          f"a non-empty list of {sorted(INTENTS)}")

    def task(self, spec: ScenarioSpec, index: int) -> SimulatedTask:
        return telecom_task(index, spec.seed, spec.difficulty,
                            tuple(spec.params.get("intents", INTENTS)))
