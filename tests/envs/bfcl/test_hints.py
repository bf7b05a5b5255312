"""The augmented environment's hints: built from schemas and live state, not baked strings."""

from seetjax.envs.base import StepCode, StepResult
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.hints import argument_hint, example_call, format_hint, result_hint, step_hint
from seetjax.tools.calls import ParseError, ToolCall


def executor_for(class_name, category="base"):
    task = next(t for t in load_tasks(category) if class_name in t.involved_classes)
    return task.new_executor()


def test_format_hint_shows_the_expected_format_with_a_real_tool():
    ex = executor_for("GorillaFileSystem")
    error = ParseError("unclosed bracket", "python", line=1, column=9)
    hint = format_hint(error, ex, "python")
    assert "(line 1, column 9)" in hint and "a Python list of calls" in hint
    example = hint.split("e.g. ")[1].rstrip(".")
    assert example.startswith("[") and example[1:].split("(")[0] in ex.available
    assert "<tool_call>{" in format_hint(error, ex, "hermes")


def test_format_hint_when_no_task_tool_is_offered():
    # A retrieved toolset may offer none of the task's tools: the example is any of its tools.
    ex = executor_for("GorillaFileSystem")
    ex.available = set()
    hint = format_hint(ParseError("unclosed bracket", "python"), ex, "python")
    assert hint.split("e.g. [")[1].split("(")[0] in ex.schemas


def test_unknown_tool_gets_the_nearest_names():
    ex = executor_for("GorillaFileSystem")
    result = ex.execute(ToolCall("mkdirs", {"dir_name": "a"}))
    assert "did you mean `mkdir`" in result_hint(result, ex, "python")


def test_argument_problems_name_argument_type_and_required_ones():
    ex = executor_for("GorillaFileSystem")
    schema = ex.schemas["mv"]
    missing = ex.execute(ToolCall("mv", {"source": "a"}))
    hint = result_hint(missing, ex, "python")
    assert "`mv` needs `destination` (string)" in hint and "`source`, `destination`" in hint
    unknown = ex.execute(ToolCall("mv", {"source": "a", "destinaton": "b"}))
    assert "Did you mean `destination`?" in result_hint(unknown, ex, "python")
    wrong = ex.execute(ToolCall("tail", {"file_name": "a", "lines": "ten"}))
    assert "`lines` of `tail` must be integer, e.g. lines=1" in result_hint(wrong, ex, "python")
    assert example_call(schema).args == {"source": "text", "destination": "text"}
    assert all(argument_hint(e, schema) for e in missing.argument_errors)


def test_file_system_hint_reads_the_live_directory():
    ex = executor_for("GorillaFileSystem")
    fs = ex.instances["GorillaFileSystem"]
    before = fs.pwd()["current_working_directory"]
    result = ex.execute(ToolCall("cat", {"file_name": "missing.txt"}))
    hint = result_hint(result, ex, "python")
    assert f"You are in `{before}`" in hint
    assert all(f"`{name}`" in hint for name in fs.ls()["current_directory_content"][:3])
    ex.execute(ToolCall("cd", {"folder": fs.ls()["current_directory_content"][0]}))
    assert fs.pwd()["current_working_directory"] in result_hint(
        ex.execute(ToolCall("cat", {"file_name": "missing.txt"})), ex, "python")


def test_login_and_prerequisite_hints_follow_state():
    trading = executor_for("TradingBot")
    trading.instances["TradingBot"].authenticated = False
    result = trading.execute(ToolCall("place_order", {"order_type": "Buy", "symbol": "AAPL",
                                                      "price": 1.0, "amount": 1}))
    assert "`trading_login(" in result_hint(result, trading, "python")
    car = executor_for("VehicleControlAPI")
    vehicle = car.instances["VehicleControlAPI"]
    vehicle.doorStatus = {d: "unlocked" for d in vehicle.doorStatus}
    vehicle.remainingUnlockedDoors = 4
    hint = result_hint(car.execute(ToolCall("startEngine", {"ignitionMode": "START"})), car,
                       "python")
    assert "`lockDoors(unlock=False" in hint and "before `startEngine`" in hint
    travel = executor_for("TravelAPI")
    bad_airport = travel.execute(ToolCall("get_flight_cost", {
        "travel_from": "XXX", "travel_to": "YYY", "travel_date": "2024-11-15",
        "travel_class": "economy"}))
    assert not bad_airport.ok
    assert "list_all_airports()" in result_hint(bad_airport, travel, "python")
    bad_token = travel.execute(ToolCall("book_flight", {
        "access_token": "bad", "card_id": "x", "travel_date": "2024-11-15", "travel_from": "SFO",
        "travel_to": "LAX", "travel_class": "economy"}))
    assert "authenticate_travel(" in result_hint(bad_token, travel, "python")


def test_step_hint_is_none_for_clean_steps():
    ex = executor_for("GorillaFileSystem")
    assert step_hint(StepResult(0, StepCode.CLEAN_CALL, ()), ex, "python") is None
