"""What BFCL's tools know by name, read from the tools themselves rather than restated here.

Some tools answer only for a closed set of names (a company's ticker, a city's airport or zipcode,
the flight routes and driving distances they have a table for). A plan that names anything else
would fail, so worlds and plans draw from these sets, per split (`vocab`'s `city` and `company`),
and the values come from calling bfcl_eval's own instances once, cached.
"""

from __future__ import annotations

import functools
from typing import Any

from seetjax.envs.bfcl.data import api_class
from seetjax.envs.generated.vocab import vocab

_PROBE_DATE = "2024-01-01"  # get_flight_cost fails on a missing route whatever the date


@functools.cache
def _instance(class_name: str) -> Any:
    # Only read-only tools are called on it (lookups whose answers do not depend on state).
    instance = api_class(class_name)()
    instance._load_scenario({})
    return instance


@functools.cache
def company_symbols(split: str) -> dict[str, str]:
    """Company name -> ticker, for the companies of `split` that get_symbol_by_name knows."""
    lookup = _instance("TradingBot").get_symbol_by_name
    symbols = {name: lookup(name)["symbol"] for name in vocab("company", split)}
    return {name: s for name, s in symbols.items() if s != "Stock not found"}


@functools.cache
def airports(split: str) -> dict[str, str]:
    """City -> its airport code, for the cities of `split` that get_nearest_airport_by_city knows."""
    lookup = _instance("TravelAPI").get_nearest_airport_by_city
    codes = {city: lookup(city)["nearest_airport"] for city in vocab("city", split)}
    return {city: code for city, code in codes.items() if code != "Unknown"}


@functools.cache
def routes(split: str) -> tuple[tuple[str, str], ...]:
    """(from, to) airport codes of the flights get_flight_cost prices, both ends in `split`."""
    api, codes = _instance("TravelAPI"), sorted(airports(split).values())
    found = []
    for origin in codes:
        for destination in codes:
            try:
                api.get_flight_cost(origin, destination, _PROBE_DATE, "economy")
            except ValueError:
                continue
            found.append((origin, destination))
    return tuple(found)


@functools.cache
def flight_cost(origin: str, destination: str, date: str, travel_class: str) -> float:
    """The price get_flight_cost quotes (and book_flight charges) for one flight."""
    quote = _instance("TravelAPI").get_flight_cost(origin, destination, date, travel_class)
    return quote["travel_cost_list"][0]


@functools.cache
def zipcodes(split: str) -> dict[str, str]:
    """City -> zipcode, for the cities of `split` that get_zipcode_based_on_city knows."""
    lookup = _instance("VehicleControlAPI").get_zipcode_based_on_city
    codes = {city: lookup(city)["zipcode"] for city in vocab("city", split)}
    return {city: code for city, code in codes.items() if code != "00000"}


@functools.cache
def distances(split: str) -> tuple[tuple[str, str], ...]:
    """Pairs of cities of `split` that estimate_distance has a distance for."""
    estimate, codes = _instance("VehicleControlAPI").estimate_distance, zipcodes(split)
    cities = sorted(codes)
    return tuple((a, b) for i, a in enumerate(cities) for b in cities[i + 1:]
                 if "error" not in estimate(codes[a], codes[b]))
