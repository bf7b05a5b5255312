"""Requests on VehicleControlAPI: doors, engine, fuel, climate, lights, brakes, cruise control,
navigation and trip estimates."""

from __future__ import annotations

from typing import Any

from seetjax.envs.generated import catalog
from seetjax.envs.generated.plans.base import Action, PlanContext, call, listed, query
from seetjax.envs.generated.vocab import vocab
from seetjax.envs.generated.world import DOORS

_DOOR_NAMES = {"driver": "driver's", "passenger": "passenger", "rear_left": "rear left",
               "rear_right": "rear right"}


def _car(ctx: PlanContext) -> Any:
    return ctx.instance("VehicleControlAPI")


def _doors_text(doors: list[str]) -> str:
    if len(doors) == len(DOORS):
        return "all the doors"
    names = listed([_DOOR_NAMES[d] for d in doors])
    return f"the {names} door{'s' if len(doors) > 1 else ''}"


def car_doors(ctx: PlanContext) -> Action | None:
    """Locks some unlocked doors or unlocks some locked ones."""
    unlock = ctx.rng.random() < 0.5
    status = "locked" if unlock else "unlocked"
    candidates = [d for d in DOORS if _car(ctx).doorStatus[d] == status]
    if not candidates:
        return None
    doors = sorted(ctx.rng.sample(candidates, ctx.rng.randint(1, len(candidates))), key=DOORS.index)
    return Action(f"car.{'unlock' if unlock else 'lock'}",
                  (call("lockDoors", unlock=unlock, door=doors),), {"doors": _doors_text(doors)})


def car_start(ctx: PlanContext) -> Action | None:
    """BFCL's start sequence: lock what is unlocked, press the brake fully, start."""
    car = _car(ctx)
    if car.engine_state == "running":
        return None
    unlocked = [d for d in DOORS if car.doorStatus[d] == "unlocked"]
    locking = (call("lockDoors", unlock=False, door=unlocked),) if unlocked else ()
    return Action("car.start", (*locking, call("pressBrakePedal", pedalPosition=1.0),
                                call("startEngine", ignitionMode="START")))


def car_fill(ctx: PlanContext) -> Action | None:
    room = 50 - _car(ctx).fuelLevel
    if room < 2:
        return None
    gallons = ctx.rng.randint(1, int(room))
    return Action("car.fill", (call("fillFuelTank", fuelAmount=gallons),),
                  {"gallons": str(gallons)}, "gallons")


def car_fill_liters(ctx: PlanContext) -> Action | None:
    """Fuel in liters: converted with liter_to_gallon, its output is the amount to fill."""
    room = (50 - _car(ctx).fuelLevel) / 0.3
    if room < 4:
        return None
    liters = ctx.rng.randrange(2, int(room), 2)
    gallons = _car(ctx).liter_to_gallon(liters)["gallon"]
    return Action("car.fill_liters", (call("liter_to_gallon", liter=liters),
                                      call("fillFuelTank", fuelAmount=gallons)),
                  {"liters": str(liters)}, "liters")


_MODES = ("auto", "cool", "heat", "defrost")


def car_climate(ctx: PlanContext) -> Action | None:
    temperature, fan = ctx.rng.randint(16, 28), ctx.rng.randrange(10, 101, 10)
    if ctx.rng.random() < 0.5:
        return Action("car.climate", (call("adjustClimateControl", temperature=temperature),),
                      {"temperature": str(temperature)}, "temperature")
    mode = ctx.rng.choice(_MODES)
    return Action("car.climate_full", (call("adjustClimateControl", temperature=temperature,
                                            fanSpeed=fan, mode=mode),),
                  {"temperature": str(temperature), "fan": str(fan), "mode": mode}, "fan")


def car_climate_fahrenheit(ctx: PlanContext) -> Action | None:
    temperature = ctx.rng.randint(60, 82)
    return Action("car.climate_fahrenheit", (call("adjustClimateControl", temperature=temperature,
                                                  unit="fahrenheit"),),
                  {"temperature": str(temperature)}, "temperature")


def car_headlights(ctx: PlanContext) -> Action | None:
    mode = "off" if _car(ctx).headLightStatus == "on" else "on"
    return Action(f"car.headlights_{mode}", (call("setHeadlights", mode=mode),))


_STATUS = {"fuel": "fuel level", "battery": "battery voltage", "doors": "door locks",
           "climate": "climate settings", "headlights": "headlights", "parkingBrake":
           "parking brake", "brakePedal": "brake pedal", "engine": "engine state"}


def car_status(ctx: PlanContext) -> Action | None:
    option = ctx.rng.choice(sorted(_STATUS))
    return Action("car.status", (call("displayCarStatus", option=option),),
                  {"part": _STATUS[option]})


def car_parking_brake(ctx: PlanContext) -> Action | None:
    mode = "release" if _car(ctx).parkingBrakeStatus == "engaged" else "engage"
    return Action(f"car.parking_brake_{mode}", (call("activateParkingBrake", mode=mode),))


def car_brake(ctx: PlanContext) -> Action | None:
    if _car(ctx).brakePedalStatus == "pressed":
        return Action("car.brake_release", (call("releaseBrakePedal"),))
    position = ctx.rng.choice([0.25, 0.5, 0.75, 1.0])
    return Action("car.brake_press", (call("pressBrakePedal", pedalPosition=position),),
                  {"percent": f"{position * 100:.0f}%"})


def car_cruise(ctx: PlanContext) -> Action | None:
    if _car(ctx).engine_state != "running":
        return None
    speed, distance = ctx.rng.randrange(30, 121, 5), ctx.rng.randrange(20, 151, 10)
    return Action("car.cruise", (call("setCruiseControl", speed=speed, activate=True,
                                      distanceToNextVehicle=distance),),
                  {"speed": str(speed), "distance": str(distance)}, "distance")


def car_navigate(ctx: PlanContext) -> Action | None:
    street, city = ctx.rng.choice(vocab("street", ctx.split)), ctx.rng.choice(vocab("city", ctx.split))
    address = f"{ctx.rng.randint(1, 9999)} {street}, {city}, {ctx.rng.choice(['CA', 'NY', 'WA', 'TX'])}"
    return Action("car.navigate", (call("set_navigation", destination=address),),
                  {"address": address}, "address")


def car_distance(ctx: PlanContext) -> Action | None:
    """A distance between two cities: their zipcodes come from get_zipcode_based_on_city."""
    first, second = ctx.rng.choice(catalog.distances(ctx.split))
    if ctx.rng.random() < 0.5:
        first, second = second, first
    zips = catalog.zipcodes(ctx.split)
    return Action("car.distance", (call("get_zipcode_based_on_city", city=first),
                                   call("get_zipcode_based_on_city", city=second),
                                   call("estimate_distance", cityA=zips[first], cityB=zips[second])),
                  {"city": first, "other": second}, "other")


def car_range(ctx: PlanContext) -> Action | None:
    distance = ctx.rng.randrange(50, 1500, 10)
    return Action("car.range", (call("estimate_drive_feasibility_by_mileage", distance=distance),),
                  {"miles": str(distance)}, "miles")


def car_convert(ctx: PlanContext) -> Action | None:
    amount = ctx.rng.randint(1, 60)
    tool, unit = ctx.rng.choice([("gallon_to_liter", "gallon"), ("liter_to_gallon", "liter")])
    return Action(f"car.{tool}", (call(tool, **{unit: amount}),), {"amount": str(amount)},
                  "amount")


def car_log(ctx: PlanContext) -> Action | None:
    lines = ctx.rng.sample(vocab("line", ctx.split), ctx.rng.randint(1, 2))
    return Action("car.log", (call("display_log", messages=lines),),
                  {"messages": " and ".join(f"'{line}'" for line in lines)}, "messages")


PROPOSERS = (car_doors, car_doors, car_start, car_start, car_fill, car_fill_liters, car_climate,
             car_climate_fahrenheit, car_headlights, car_status, car_parking_brake, car_brake,
             car_cruise, car_cruise, car_navigate, car_distance, car_distance, car_range,
             car_convert, car_log,
             query("car.tires", "check_tire_pressure"),
             query("car.tire_shop", "find_nearest_tire_shop"),
             query("car.outside", "get_outside_temperature_from_google"),
             query("car.speed", "get_current_speed"))
