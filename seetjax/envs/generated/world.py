"""Random initial states (`initial_config` entries) of the BFCL API classes.

Each builder returns the scenario dict one class's `_load_scenario` reads, in the shape BFCL's own
entries use, plus `WorldFacts`: what the user knows but the state does not hold (login
credentials, the travel client's keys). Entities come from `vocab` of the task's split, names BFCL's
tools know from `catalog`; `size` scales how much state there is (long_context tasks use a large
one, beside BFCL's own `long_context=True` padding). The car has no collections: its state does
not grow with `size`.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seetjax.envs.generated import catalog
from seetjax.envs.generated.vocab import vocab

EXTENSIONS = (".txt", ".csv", ".md", ".log", ".json")


@dataclass
class WorldFacts:
    """What the simulated user knows beyond the initial state: (username, password) per class,
    and other details per class (the travel client's keys and the traveller's name)."""

    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    details: dict[str, dict[str, str]] = field(default_factory=dict)


def _sample(rng: random.Random, items: tuple[str, ...], low: int, high: int,
            size: int) -> list[str]:
    """Between low*size and high*size distinct items (fewer if the list is shorter)."""
    return rng.sample(items, min(rng.randint(low * size, high * size), len(items)))


def _login(rng: random.Random, split: str, facts: WorldFacts, class_name: str) -> str:
    """A username and password the user knows for `class_name`; returns the username."""
    username = f"{rng.choice(vocab('person', split)).lower()}_{rng.randint(10, 99)}"
    facts.credentials[class_name] = (username, _password(rng))
    return username


def _password(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=8))


def file_content(rng: random.Random, split: str) -> str:
    """1-4 distinct lines from the split's line vocabulary."""
    return "\n".join(rng.sample(vocab("line", split), rng.randint(1, 4)))


def file_system(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """A root folder named after a person with files and folders two levels deep."""

    def directory(depth: int) -> dict[str, Any]:
        contents: dict[str, Any] = {}
        stems = _sample(rng, vocab("stem", split), 1, 3, size)
        for stem in stems:
            contents[stem + rng.choice(EXTENSIONS)] = {"type": "file",
                                                       "content": file_content(rng, split)}
        if depth < 2:
            for folder in rng.sample(vocab("folder", split), rng.randint(depth == 0, 2)):
                contents[folder] = directory(depth + 1)
        return {"type": "directory", "contents": contents}

    root = rng.choice(vocab("person", split)).lower()
    return {"root": {root: directory(0)}}


def message_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """Workspace users USR001.. with a few sent messages; half the time someone is logged in."""
    people = _sample(rng, vocab("person", split), 3, 5, size)
    user_map = {name: f"USR{i + 1:03d}" for i, name in enumerate(people)}
    ids = list(user_map.values())
    inbox = [{rng.choice(ids): rng.choice(vocab("message", split))}
             for _ in range(rng.randint(size, 3 * size))]
    return {"user_count": len(people), "user_map": user_map, "inbox": inbox,
            "message_count": len(inbox), "current_user": rng.choice([None, rng.choice(ids)]),
            "random_seed": rng.randint(0, 10**6)}


def ticket_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """A ticket queue of the user and colleagues; half the time the user is logged in."""
    person, *others = rng.sample(vocab("person", split), 3)
    username = f"{person.lower()}_{rng.randint(10, 99)}"
    facts.credentials["TicketAPI"] = (username, _password(rng))
    queue = []
    for i, title in enumerate(_sample(rng, vocab("title", split), 1, 3, size)):
        owner = username if rng.random() < 0.7 else f"{rng.choice(others).lower()}_{i}"
        queue.append({"id": i + 1, "title": title,
                      "description": rng.choice(vocab("description", split)),
                      "status": rng.choice(["Open", "Open", "In Progress", "Closed"]),
                      "priority": rng.randint(1, 5), "created_by": owner})
    return {"ticket_queue": queue, "ticket_counter": len(queue) + 1,
            "current_user": rng.choice([None, username])}


def _stock(rng: random.Random) -> dict[str, float]:
    price = round(rng.uniform(5, 900), 2)
    return {"price": price, "percent_change": round(rng.uniform(-2, 2), 2),
            "volume": round(rng.uniform(0.3, 4), 3),
            "MA(5)": round(price * rng.uniform(0.97, 1.03), 2),
            "MA(20)": round(price * rng.uniform(0.95, 1.05), 2)}


def trading_bot(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """Stocks (companies BFCL's symbol lookup knows and our own tickers), past orders, an
    account; logged in and the market open half the time each."""
    _login(rng, split, facts, "TradingBot")
    companies = catalog.company_symbols(split)
    symbols = [companies[n] for n in _sample(rng, tuple(companies), 1, 2, size)]
    symbols += _sample(rng, vocab("ticker", split), 2, 4, size)
    stocks = {symbol: _stock(rng) for symbol in symbols}
    first = rng.randrange(10000, 90000, 100)
    orders = {}
    for order_id in range(first, first + rng.randint(size, 3 * size)):
        symbol = rng.choice(symbols)
        orders[str(order_id)] = {
            "id": order_id, "order_type": rng.choice(["Buy", "Sell"]), "symbol": symbol,
            "price": stocks[symbol]["price"], "amount": rng.randint(1, 100),
            "status": rng.choice(["Open", "Pending", "Completed", "Cancelled"])}
    return {"orders": orders,
            "account_info": {"account_id": rng.randint(10000, 99999),
                             "balance": round(rng.uniform(2000, 50000), 2),
                             "binding_card": rng.randint(10**15, 10**16 - 1)},
            "authenticated": rng.random() < 0.5, "market_status": rng.choice(["Open", "Closed"]),
            "order_counter": first + len(orders), "stocks": stocks,
            "watch_list": rng.sample(symbols, rng.randint(1, min(3, len(symbols)))),
            "transaction_history": [], "random_seed": rng.randint(0, 10**6)}


def date(rng: random.Random, first_year: int, last_year: int) -> str:
    """A YYYY-MM-DD date in the years given (days 1-28: valid in every month)."""
    return f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


TRAVEL_CLASSES = ("economy", "business", "first")


def card_number(rng: random.Random) -> str:
    return "-".join(f"{rng.randint(1000, 9999)}" for _ in range(4))


def travel_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """Registered cards and past bookings of one traveller; half the time they are logged in
    (the user then knows the access token), a budget limit a third of the time."""
    first, last = rng.choice(vocab("person", split)), rng.choice(vocab("surname", split))
    facts.details["TravelAPI"] = {
        "client_id": f"client_{rng.randint(100, 999)}", "client_secret": _password(rng),
        "refresh_token": f"token{rng.randint(100000, 999999)}", "first_name": first,
        "last_name": last}
    cards = {}
    for _ in range(rng.randint(1, 2 * size)):
        cards[str(rng.randint(10**11, 10**12 - 1))] = {
            "card_number": card_number(rng),
            "expiration_date": f"{rng.randint(1, 12):02d}/{rng.randint(2026, 2030)}",
            "cardholder_name": f"{first} {last}", "card_verification_number": rng.randint(100, 999),
            "balance": round(rng.uniform(2000, 30000), 2)}
    bookings = {}
    for _ in range(rng.randint(0, size)):
        (origin, destination), day = rng.choice(catalog.routes(split)), date(rng, 2023, 2025)
        travel_class = rng.choice(TRAVEL_CLASSES)
        bookings[str(rng.randint(10**6, 10**7 - 1))] = {
            "card_id": rng.choice(list(cards)), "travel_date": day, "travel_from": origin,
            "travel_to": destination, "travel_class": travel_class,
            "travel_cost": catalog.flight_cost(origin, destination, day, travel_class),
            "transaction_id": str(rng.randint(10**7, 10**8 - 1))}
    logged_in = rng.random() < 0.5
    token = "".join(rng.choices(string.ascii_lowercase + string.digits, k=10))
    return {"credit_card_list": cards, "booking_record": bookings,
            "access_token": token if logged_in else None,
            "token_type": "Bearer" if logged_in else None,
            "token_expires_in": 3600 if logged_in else None,
            "token_scope": "read_write" if logged_in else None,
            "user_first_name": first if logged_in else None,
            "user_last_name": last if logged_in else None,
            "budget_limit": round(rng.uniform(1000, 5000), 2) if rng.random() < 0.3 else None,
            "random_seed": rng.randint(0, 10**6)}


DOORS = ("driver", "passenger", "rear_left", "rear_right")


def vehicle_control(rng: random.Random, split: str, size: int,
                    facts: WorldFacts) -> dict[str, Any]:
    """A parked car: doors, fuel, climate, lights and tyres at random values; the engine off."""
    return {"fuelLevel": round(rng.uniform(2, 40), 1),
            "batteryVoltage": round(rng.uniform(11.8, 13.2), 1), "engineState": "stopped",
            "doorStatus": {door: rng.choice(["locked", "unlocked"]) for door in DOORS},
            "acTemperature": float(rng.randint(16, 28)), "fanSpeed": rng.randrange(0, 101, 10),
            "acMode": rng.choice(["auto", "cool", "heat", "defrost"]),
            "humidityLevel": float(rng.randint(30, 70)),
            "headLightStatus": rng.choice(["on", "off"]),
            "parkingBrakeStatus": "released", "parkingBrakeForce": 0.0, "slopeAngle": 0.0,
            "brakePedalStatus": "released", "brakePedalForce": 0.0,
            "distanceToNextVehicle": float(rng.randint(20, 100)), "cruiseStatus": "inactive",
            "destination": "None",
            **{f"{tire}TirePressure": float(rng.randint(26, 38))
               for tire in ("frontLeft", "frontRight", "rearLeft", "rearRight")},
            "random_seed": rng.randint(0, 10**6)}


def twitter_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """The user's account, the accounts they follow and tweets by both; logged in half the
    time."""
    username = _login(rng, split, facts, "TwitterAPI")
    people = [p for p in vocab("person", split) if p.lower() != username.split("_")[0]]
    following = [f"{p.lower()}_{rng.randint(10, 99)}" for p in _sample(rng, tuple(people), 1, 3, size)]
    tweets = {}
    for i in range(rng.randint(size, 3 * size)):
        tags = [f"#{t}" for t in rng.sample(vocab("hashtag", split), rng.randint(0, 2))]
        mentions = [f"@{rng.choice(following)}"] if rng.random() < 0.3 else []
        tweets[str(i)] = {"id": i, "username": rng.choice([username, *following]),
                          "content": rng.choice(vocab("tweet", split)), "tags": tags,
                          "mentions": mentions}
    return {"username": username, "password": facts.credentials["TwitterAPI"][1],
            "authenticated": rng.random() < 0.5, "tweets": tweets, "comments": {},
            "retweets": {}, "following_list": following, "tweet_counter": len(tweets)}


# Stateless classes (MathAPI) have no entry: bfcl_eval does not load a scenario for them.
BUILDERS: dict[str, Callable[[random.Random, str, int, WorldFacts], dict[str, Any]]] = {
    "GorillaFileSystem": file_system,
    "MessageAPI": message_api,
    "TicketAPI": ticket_api,
    "TradingBot": trading_bot,
    "TravelAPI": travel_api,
    "VehicleControlAPI": vehicle_control,
    "TwitterAPI": twitter_api,
}


def initial_config(classes: list[str], rng: random.Random, split: str,
                   size: int) -> tuple[dict[str, Any], WorldFacts]:
    """The initial_config of a task involving `classes`, and the facts that go with it."""
    facts = WorldFacts()
    config = {c: BUILDERS[c](rng, split, size, facts) for c in classes if c in BUILDERS}
    return config, facts
