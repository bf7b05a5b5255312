"""Generated BFCL-format tasks: ground truth passes our checker, bfcl_eval's checker and a
BfclEnv replay; determinism; train/test disjointness; miss_param, miss_func, long_context shape."""

import functools
import json

import pytest

from seetjax.envs.base import StepCode
from seetjax.envs.bfcl import BfclEnv
from seetjax.envs.bfcl_data import CATEGORIES
from seetjax.envs.generated import CLASSES, Difficulty, generate_tasks, task_entry, templates
from seetjax.envs.generated.vocab import KINDS, vocab
from seetjax.eval.bfcl_checker import check_entry
from tests.eval.bfcl_reference import bfcl_check

SPLITS = ("train", "test")
PER_CELL = 20


@functools.cache
def sample(category, split, seed=0):
    return tuple(generate_tasks(PER_CELL, seed=seed, split=split, category=category))


def trajectory(task):
    return [[list(calls)] if calls else [] for calls in task.ground_truth]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_passes_both_checkers_and_replays_cleanly(category, split):
    env = BfclEnv()
    for task in sample(category, split):
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


# Keys of the initial states that are structure, not entities.
_STRUCTURE = {"root", "type", "contents", "content", "user_count", "user_map", "inbox",
              "message_count", "current_user", "random_seed", "ticket_queue", "ticket_counter",
              "id", "title", "description", "status", "priority", "created_by"}
# Call arguments drawn from an entity's text rather than being one (a word of a file line).
_DERIVED = {"pattern", "keyword"}


def _atoms(value):
    """Entity candidates in a state or argument value: strings, file lines, file stems, the
    person in a user name, lower-cased."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in _STRUCTURE:
                yield from _atoms(key)
            yield from _atoms(item)
    elif isinstance(value, list):
        for item in value:
            yield from _atoms(item)
    elif isinstance(value, str):
        for text in (value, *value.split("\n"), value.rsplit(".", 1)[0], value.split("_")[0]):
            yield text.lower()


def _entities(tasks):
    found = set()
    for task in tasks:
        found.update(_atoms(dict(task.initial_config)))
        for calls in task.ground_truth:
            for call in calls:
                found.update(_atoms({k: v for k, v in call.args.items() if k not in _DERIVED}))
    return found


def test_train_and_test_tasks_share_no_entities():
    vocabulary = {split: {item.lower() for kind in KINDS for item in vocab(kind, split)}
                  for split in SPLITS}
    for split, other in (("train", "test"), ("test", "train")):
        used = _entities(t for c in CATEGORIES for t in sample(c, split))
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
