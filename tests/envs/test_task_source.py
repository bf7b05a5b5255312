"""Task sources: BFCL and generated tasks behind one `load`, splits that name their source."""

import pytest

from seetjax.envs.bfcl.data import CATEGORIES
from seetjax.envs.bfcl.splits import load_split
from seetjax.envs.generated import generate_tasks
from seetjax.envs.task_source import VALIDATION_START, TaskSource, task_source


def test_bfcl_splits_are_load_split():
    source = TaskSource("bfcl")
    assert [t.id for t in source.load("test", ("base",), 3)] == \
        [t.id for t in load_split("test", ("base",), 3)]


def test_generated_splits_and_prefixed_names():
    source = task_source("generated", seed=5, max_turns=2)
    train = source.load("train", CATEGORIES, 2)
    assert [t.id for t in train] == [t.id for c in CATEGORIES for t in generate_tasks(
        2, seed=5, category=c, difficulty=source.difficulty)]
    assert all(len(t.turns) <= 3 for t in train)  # max_turns 2, +1 for miss_param/miss_func
    validation = source.load("validation", ("base",), 2)
    assert [t.id for t in validation] == [f"gen_train_base_5_{VALIDATION_START + i}"
                                          for i in range(2)]  # training vocabulary, unseen
    test = source.load("test", ("base",), 2)
    assert all(t.id.startswith("gen_test_base_5_") for t in test)  # held-out vocabulary
    assert source.load("bfcl:test", ("base",), 1)[0].id == load_split("test", ("base",), 1)[0].id
    assert TaskSource("bfcl").resolve("generated:test") == ("generated", "test")


@pytest.mark.parametrize("split,count,message", [
    ("train", None, "generated tasks are unlimited"),
    ("train_full", 2, r"generated splits are \('train', 'validation', 'test'\)"),
    ("hub:test", 2, "unknown task source 'hub'"),
    ("bfcl:dev", 2, "bfcl splits are")])
def test_bad_splits_say_why(split, count, message):
    with pytest.raises(ValueError, match=message):
        task_source("generated").check(split, count)


def test_bad_sources_and_knobs_are_named():
    with pytest.raises(ValueError, match="TaskSource.kind='hub': one of"):
        task_source("hub")
    with pytest.raises(ValueError, match=r"TaskSource.classes=\(.*\): a non-empty subset"):
        task_source("generated", api_classes="GorillaFileSystem,Nope")
    with pytest.raises(ValueError, match=r"Difficulty.turns=\(3, 2\): must be"):
        task_source("generated", min_turns=3, max_turns=2)


def test_the_hard_testbed_makes_its_tasks():
    """configs/testbed_hard.py's tier (copy-free, two classes, two to three turns) has a plan for
    every task the run and its evaluation draw (a tier with too few requests that name no value
    fails here, naming the classes), each with two or more user turns, some over two classes."""
    from tests.configlib import config_with
    data = config_with("testbed_hard", {}).data
    source = task_source(data.source, **data.generated)
    categories = data.categories.split(",")
    for split, count in (("train", data.tasks_per_category), ("test", 32)):
        tasks = source.load(split, categories, count)
        assert len(tasks) == count * len(categories)
        assert all(len(t.turns) >= 2 for t in tasks)
        assert any(len(t.involved_classes) >= 2 for t in tasks)  # "at most two": some do
