"""Generated BFCL-format tasks: ground truth passes our checker, bfcl_eval's checker and a
BfclEnv replay, for every class; determinism, and the original four classes' tasks unchanged;
train/test disjointness; class combinations as BFCL's; miss_param, miss_func, long_context shape;
generation never fails on a seeded sample of classes, categories and difficulties."""

import functools
import hashlib
import json

import pytest

from seetjax.envs.base import StepCode
from seetjax.envs.bfcl.checker import check_entry
from seetjax.envs.bfcl.data import CATEGORIES, class_schemas, load_category
from seetjax.envs.bfcl.env import BfclEnv
from seetjax.envs.generated import (
    CLASSES,
    Difficulty,
    catalog,
    generate_task,
    generate_tasks,
    task_entry,
    templates,
)
from seetjax.envs.generated.plans import DOMAIN_CLASSES, plausible
from seetjax.envs.generated.vocab import KINDS, vocab
from tests.envs.bfcl.bfcl_reference import bfcl_check

SPLITS = ("train", "test")
PER_CELL = 20


@functools.cache
def sample(category, split, seed=0):
    return tuple(generate_tasks(PER_CELL, seed=seed, split=split, category=category))


def trajectory(task):
    return [[list(calls)] if calls else [] for calls in task.ground_truth]


def assert_solvable(task, env):
    """The ground truth passes our checker and bfcl_eval's, and replays cleanly in `env`."""
    assert check_entry(task, trajectory(task)).valid, task.id
    assert bfcl_check(task_entry(task), trajectory(task))["valid"], task.id
    env.reset(task)
    while not env.done:
        calls = task.ground_truth[env.turn]
        if calls:
            step = env.step("[" + ", ".join(c.to_python() for c in calls) + "]")
            assert step.code is StepCode.CLEAN_CALL, (task.id, step.observations)
        assert env.step("Done.").code is StepCode.NO_CALL
    assert env.result().valid, task.id


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_passes_both_checkers_and_replays_cleanly(category, split):
    env = BfclEnv()
    for task in sample(category, split):
        assert_solvable(task, env)


PER_CLASS_CELL = 5


@functools.cache
def class_sample(class_name, category, split):
    return tuple(generate_tasks(PER_CLASS_CELL, seed=2, split=split, category=category,
                                classes=(class_name,)))


@pytest.mark.parametrize("class_name", CLASSES)
def test_each_class_alone_passes_both_checkers_in_every_category_and_split(class_name):
    env = BfclEnv()
    for category in CATEGORIES:
        for split in SPLITS:
            for task in class_sample(class_name, category, split):
                assert task.involved_classes == (class_name,), task.id
                assert_solvable(task, env)


# sha256 of 15 tasks per (split, category) over the original four classes, seed 0, computed
# before TradingBot, TravelAPI, VehicleControlAPI and TwitterAPI were added: their tasks are the
# same (the default `classes`, all eight, draws other tasks: a sample over more classes).
ORIGINAL_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TicketAPI")
ORIGINAL_DIGEST = "bbcd1e187fd172c077ccd26511d7f1079a27bbef31333d8cc6e04bb436b6e4d7"


def test_original_four_classes_draw_the_same_tasks_as_before():
    digest = hashlib.sha256()
    for split in SPLITS:
        for category in CATEGORIES:
            for task in generate_tasks(15, seed=0, split=split, category=category,
                                       classes=ORIGINAL_CLASSES):
                digest.update(json.dumps([task_entry(task), task.docs], sort_keys=True,
                                         default=str).encode())
    assert digest.hexdigest() == ORIGINAL_DIGEST


def test_format_mirrors_bfcl():
    for category in CATEGORIES:
        for i, task in enumerate(sample(category, "train")):
            assert task.id == f"gen_train_{category}_0_{i}" and task.index == i
            assert task.category == category and task.long_context == (category == "long_context")
            assert 1 <= task.num_turns <= 5 and len(task.ground_truth) == task.num_turns
            assert set(task.initial_config) <= set(task.involved_classes) <= set(CLASSES)
            json.dumps(task.initial_config)  # plain JSON, as in BFCL's data files
            shown = {d["name"] for d in task.docs} | task.held_out_names()
            assert shown == set(task.schemas), task.id
            assert all(len(calls) <= 3 for calls in task.ground_truth)


def test_same_seed_same_tasks_other_seed_other_tasks():
    def view(tasks):
        return [(task_entry(t), t.docs) for t in tasks]
    for category in CATEGORIES:
        again = generate_tasks(PER_CELL, seed=0, split="train", category=category)
        assert view(again) == view(sample(category, "train"))
        other = generate_tasks(PER_CELL, seed=1, split="train", category=category)
        assert [e["question"] for e, _ in view(other)] != [e["question"] for e, _ in view(again)]
    # A task depends on its index, not on how many were generated before it.
    assert view(generate_tasks(3, seed=0, category="base", start=7)) == view(sample("base", "train")[7:10])


def test_entity_vocabularies_are_disjoint_and_non_empty():
    for kind in KINDS:
        train, test = set(vocab(kind, "train")), set(vocab(kind, "test"))
        assert train and test and not train & test, kind


# Keys of the initial states that are structure, not entities (other keys: file and folder
# names, people in a user map, stock symbols).
_STRUCTURE = {"root", "type", "contents", "content", "user_count", "user_map", "inbox",
              "message_count", "current_user", "random_seed", "ticket_queue", "ticket_counter",
              "id", "title", "description", "status", "priority", "created_by",
              # TradingBot
              "orders", "account_info", "authenticated", "market_status", "order_counter",
              "stocks", "watch_list", "transaction_history", "account_id", "balance",
              "binding_card", "price", "percent_change", "volume", "MA(5)", "MA(20)",
              "order_type", "symbol", "amount",
              # TravelAPI
              "credit_card_list", "booking_record", "access_token", "token_type",
              "token_expires_in", "token_scope", "user_first_name", "user_last_name",
              "budget_limit", "card_number", "expiration_date", "cardholder_name",
              "card_verification_number", "card_id", "travel_date", "travel_from", "travel_to",
              "travel_class", "travel_cost", "transaction_id",
              # VehicleControlAPI: its camelCase fields and the door names
              "fuelLevel", "batteryVoltage", "engineState", "doorStatus", "acTemperature",
              "fanSpeed", "acMode", "humidityLevel", "headLightStatus", "parkingBrakeStatus",
              "parkingBrakeForce", "slopeAngle", "brakePedalStatus", "brakePedalForce",
              "distanceToNextVehicle", "cruiseStatus", "destination", "frontLeftTirePressure",
              "frontRightTirePressure", "rearLeftTirePressure", "rearRightTirePressure",
              "driver", "passenger", "rear_left", "rear_right",
              # TwitterAPI
              "username", "password", "tweets", "comments", "retweets", "following_list",
              "tweet_counter", "tags", "mentions"}
# Call arguments drawn from an entity's text rather than being one (a word of a file line).
_DERIVED = {"pattern", "keyword"}


def _atoms(value):
    """Entity candidates in a state or argument value: strings, file lines, file stems, the
    person in a user name, a tag or mention without its # or @, the street and city of an
    address, lower-cased."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in _STRUCTURE:
                yield from _atoms(key)
            yield from _atoms(item)
    elif isinstance(value, list):
        for item in value:
            yield from _atoms(item)
    elif isinstance(value, str):
        value = value.lstrip("#@")
        address = [part.lstrip("0123456789 ") for part in value.split(", ")]
        for text in (value, *value.split("\n"), value.rsplit(".", 1)[0], value.split("_")[0],
                     *address):
            yield text.lower()


def _entities(tasks):
    found = set()
    for task in tasks:
        found.update(_atoms(dict(task.initial_config)))
        for calls in task.ground_truth:
            for call in calls:
                # Argument values only: argument names are the API's, not entities.
                found.update(_atoms([v for k, v in call.args.items() if k not in _DERIVED]))
    return found


def test_train_and_test_tasks_share_no_entities():
    vocabulary = {split: {item.lower() for kind in KINDS for item in vocab(kind, split)}
                  for split in SPLITS}
    for split, other in (("train", "test"), ("test", "train")):
        tasks = [t for c in CATEGORIES for t in sample(c, split)]
        tasks += [t for n in CLASSES for c in CATEGORIES for t in class_sample(n, c, split)]
        used = _entities(tasks)
        assert used & vocabulary[split], split  # the check sees the entities
        assert not used & vocabulary[other], (split, sorted(used & vocabulary[other])[:5])


def test_train_and_test_paraphrases_are_disjoint():
    lists = [*templates.TEMPLATES.values(), *(v[1] for v in templates.VAGUE.values()),
             templates.SUPPLY, templates.CONNECTORS]
    for paraphrases in lists:
        train, test = (set(templates.for_split(paraphrases, s)) for s in SPLITS)
        assert train and test and not train & test, paraphrases
    assert set(templates.VAGUE) <= set(templates.TEMPLATES)


def _leaves(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [str(value)]


def _classes_called(task):
    """The classes whose tools the ground truth calls (the others are distractors)."""
    names = {c.name for calls in task.ground_truth for c in calls}
    return {cls for cls in task.involved_classes if names & {s.name for s in class_schemas(cls)}}


def test_class_combinations_mirror_bfcl():
    bfcl_sets = {frozenset(e["involved_classes"]) for e in load_category("base")}
    assert all(plausible(s) for s in bfcl_sets)
    # BFCL pairs every domain class with every helper class: so does the generator.
    helpers = set(CLASSES) - DOMAIN_CLASSES
    assert {frozenset({d, h}) for d in DOMAIN_CLASSES for h in helpers} <= bfcl_sets
    assert not plausible({"TradingBot", "TravelAPI"})
    used = [_classes_called(t) for c in CATEGORIES for split in SPLITS for t in sample(c, split)]
    assert all(plausible(u) for u in used)
    assert any(len(u) == 2 and u & {"TradingBot", "TravelAPI", "VehicleControlAPI", "TwitterAPI"}
               for u in used)


def test_closed_name_sets_leave_both_splits_usable():
    """Cities and companies BFCL's tools know are split too, and each split keeps flight routes,
    driving distances and companies to name; no airport or zipcode is in both."""
    for split in SPLITS:
        assert catalog.routes(split) and catalog.distances(split) and catalog.company_symbols(split)
    for lookup in (catalog.airports, catalog.zipcodes, catalog.company_symbols):
        assert not set(lookup("train").values()) & set(lookup("test").values())


def test_miss_param_turn_omits_an_argument_the_next_turn_supplies():
    for split in SPLITS:
        for task in sample("miss_param", split):
            empty = [t for t, calls in enumerate(task.ground_truth) if not calls]
            assert len(empty) == 1 and not task.held_out, task.id
            turn = empty[0]
            assert task.turns[turn] and task.turns[turn + 1], task.id
            assert task.ground_truth[turn + 1], task.id
            vague, supplied = (task.turns[t][0]["content"] for t in (turn, turn + 1))
            leaves = _leaves([dict(c.args) for c in task.ground_truth[turn + 1]])
            assert any(v in supplied and v not in vague for v in leaves), task.id


def test_miss_func_holds_out_a_tool_until_its_turn():
    for split in SPLITS:
        for task in sample("miss_func", split):
            assert len(task.held_out) == 1, task.id
            (reveal, docs), = task.held_out.items()
            name = docs[0]["name"]
            assert task.turns[reveal] == () and task.ground_truth[reveal - 1] == (), task.id
            assert name in {c.name for c in task.ground_truth[reveal]}, task.id
            assert all(c.name != name for calls in task.ground_truth[:reveal] for c in calls)
            assert name not in {d["name"] for d in task.docs}, task.id


def test_difficulty_knobs():
    hard = Difficulty(turns=(4, 4), actions_per_turn=1, calls_per_turn=1, classes=1,
                      distractor_classes=2, state_size=2)
    for task in generate_tasks(10, seed=3, category="base", difficulty=hard):
        assert task.num_turns == 4 and all(len(c) == 1 for c in task.ground_truth), task.id
        used = {name for calls in task.ground_truth for c in calls for name in [c.name]}
        assert len(task.involved_classes) == 3, task.id
        assert used <= set(task.schemas)
        assert check_entry(task, trajectory(task)).valid, task.id
    only_math = generate_tasks(5, seed=0, classes=("MathAPI",))
    assert all(t.involved_classes == ("MathAPI",) for t in only_math)
    with pytest.raises(ValueError):
        Difficulty(turns=(3, 2))
    with pytest.raises(ValueError):
        generate_tasks(1, seed=0, split="validation")


def test_the_copy_free_tier_needs_no_value_from_the_request():
    # named_values=False: every argument value of a held-out (test-vocabulary) task's calls
    # (each item of a list) also occurs for that tool and argument in training tasks, so nothing
    # is copied from the request; no intent repeats within a task; the ground truth still passes
    # both checkers.
    free = Difficulty(turns=(1, 3), named_values=False)
    calls = {}
    for split in SPLITS:
        tasks = [t for category in ("base", "miss_func", "long_context")
                 for t in generate_tasks(40, seed=5, split=split, category=category,
                                         difficulty=free)]
        calls[split] = {(c.name, arg, repr(item)) for t in tasks for turn in t.ground_truth
                        for c in turn for arg, value in c.args.items()
                        for item in (value if isinstance(value, list) else [value])}
        calls[split] |= {(c.name,) for t in tasks for turn in t.ground_truth for c in turn}
        for task in tasks[::7]:
            assert check_entry(task, trajectory(task)).valid, task.id
            assert bfcl_check(task_entry(task), trajectory(task))["valid"], task.id
        for task in tasks:
            requests = [turn[0]["content"] for turn in task.turns if turn]
            assert len(requests) == len(set(requests)), task.id
    assert len(calls["test"]) >= 15
    assert calls["test"] <= calls["train"], calls["test"] - calls["train"]
    with pytest.raises(ValueError, match="named_values"):
        generate_tasks(1, seed=0, category="miss_param", difficulty=free)
    with pytest.raises(RuntimeError, match="named_values=False"):
        generate_tasks(1, seed=0, classes=("MathAPI",), difficulty=free)


# Difficulties at the edges of the knobs: one call per turn, many requests, many classes, a
# large state.
EDGE_DIFFICULTIES = (
    Difficulty(),
    Difficulty(turns=(4, 4), actions_per_turn=1, calls_per_turn=1, classes=1,
               distractor_classes=2),
    Difficulty(turns=(3, 4), actions_per_turn=3, calls_per_turn=3, classes=3,
               distractor_classes=1, state_size=3),
)


def _generates_valid_tasks(count, seed):
    """`count` tasks per (classes, difficulty, category), classes each class alone and all of
    them, splits alternating; every task generates and its ground truth passes our checker."""
    for classes in [(c,) for c in CLASSES] + [CLASSES]:
        for d, difficulty in enumerate(EDGE_DIFFICULTIES):
            for category in CATEGORIES:
                for i in range(count):
                    task = generate_task(i, seed=seed + d, split=SPLITS[i % 2], category=category,
                                         difficulty=difficulty, classes=classes)
                    assert check_entry(task, trajectory(task)).valid, task.id


def test_generation_never_fails_on_a_seeded_sample():
    # A failure is a task with no valid plan in 20 draws; a draw fails (some turn finds no
    # request) at most a few % of the time, so a million tasks fail with probability << 1e-6.
    _generates_valid_tasks(2, seed=100)


@pytest.mark.slow
def test_generation_never_fails_on_a_large_seeded_sample():
    _generates_valid_tasks(20, seed=1000)  # 2,160 tasks
