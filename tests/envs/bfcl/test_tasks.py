"""BFCL tasks and splits: counts, determinism, no scenario leakage, miss_func held-out docs."""

import pytest

from seetjax.envs.bfcl.data import CATEGORIES, load_category, load_tasks
from seetjax.envs.bfcl.splits import NUM_SCENARIOS, SPLITS, load_split, split_indices


def test_each_category_has_200_tasks_with_parsed_ground_truth():
    for category in CATEGORIES:
        tasks = load_tasks(category)
        assert len(tasks) == NUM_SCENARIOS
        assert [t.index for t in tasks] == list(range(NUM_SCENARIOS))
        assert all(t.num_turns == len(t.ground_truth) == len(t.ground_truth_text) for t in tasks)
        assert all(t.long_context == (category == "long_context") for t in tasks)
    raw = load_category("base")[5]
    task = load_tasks("base")[5]
    assert [[c.to_python() for c in turn] for turn in task.ground_truth] != []
    assert task.ground_truth_text == tuple(tuple(t) for t in raw["ground_truth"])


def test_split_sizes_and_disjointness():
    train, validation, test = (set(split_indices(s)) for s in ("train", "validation", "test"))
    assert (len(train), len(validation), len(test)) == (90, 10, 100)
    assert not (train & validation or train & test or validation & test)
    assert train | validation | test == set(range(NUM_SCENARIOS))
    assert set(split_indices("train_full")) == train | validation
    assert split_indices("all") == tuple(range(NUM_SCENARIOS))
    with pytest.raises(ValueError, match="split_indices.split='dev': one of"):
        split_indices("dev")
    assert set(SPLITS) == {"train", "validation", "test", "train_full", "all"}


def test_split_is_fixed_by_code():
    # Pinned: changing SPLIT_SALT or the ordering would silently move scenarios between splits.
    assert split_indices("validation") == (8, 27, 36, 44, 45, 65, 91, 121, 128, 173)
    assert split_indices("test")[:8] == (1, 2, 4, 6, 7, 10, 11, 13)


def test_a_scenario_is_in_the_same_split_in_every_category():
    for split in ("train", "test"):
        tasks = load_split(split)
        assert len(tasks) == 4 * len(split_indices(split))
        by_category = {c: {t.index for t in tasks if t.category == c} for c in CATEGORIES}
        assert all(indices == set(split_indices(split)) for indices in by_category.values())
    assert [t.category for t in load_split("validation", ["miss_func"])] == ["miss_func"] * 10


def test_miss_func_docs_hold_out_the_revealed_tools():
    for task in load_tasks("miss_func"):
        assert task.held_out, task.id
        shown = {d["name"] for d in task.docs}
        for turn, docs in task.held_out.items():
            assert task.turns[turn] == ()  # a reveal turn has no user question of its own
            assert not {d["name"] for d in docs} & shown
            # Held-out docs are BFCL's raw ones: the language hint is only on the docs shown.
            assert all(not d["description"].endswith("Python 3 syntax.") for d in docs)
        assert all(d["description"].endswith("Note that the provided function is in Python 3 syntax.")
                   for d in task.docs)
        assert shown | task.held_out_names() == set(task.schemas)


def test_other_categories_show_every_tool():
    for category in ("base", "miss_param", "long_context"):
        for task in load_tasks(category)[:20]:
            assert not task.held_out and {d["name"] for d in task.docs} == set(task.schemas)
