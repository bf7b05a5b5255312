"""The synthetic world: deterministic, split by entity, every hop stated by its passage, lazy at
a million passages."""

import hashlib
import itertools
import random

import pytest

from seetjax.envs.qa_search import world as world_module
from seetjax.envs.qa_search.reward import normalize_answer
from seetjax.envs.qa_search.world import KINDS, SPLITS, World, WorldConfig


def test_same_seed_same_world_other_seed_other_world(world):
    again = World(WorldConfig(seed=3))
    assert list(again.passages()) == list(world.passages())
    assert again.questions("test", 20) == world.questions("test", 20)
    other = World(WorldConfig(seed=4))
    assert other.question("test", 0) != world.question("test", 0)
    assert next(other.passages()) != next(world.passages())


def test_a_question_depends_only_on_seed_split_and_index(world):
    # Drawn alone, late or out of order: the same task.
    assert World(WorldConfig(seed=3)).question("train", 57) == world.questions("train", 60)[57]


def test_names_are_unique_and_splits_share_no_entity(world):
    titles = [p.title for p in world.passages()]
    assert len(titles) == len(set(titles)) == world.num_passages() == 2 * 200
    train = {p.title for p in world.passages(("train",))}
    for task in world.questions("test", 100):
        named = {h.answer for h in task.hops} | {h.question for h in task.hops}
        assert not any(title in text for title in train for text in named), task


def test_questions_have_one_to_four_hops_each_stated_by_its_passage(world):
    passages = {p.id: p for p in world.passages()}
    tasks = world.questions("train", 200)
    assert {t.num_hops for t in tasks} == {1, 2, 3, 4}
    for task in tasks:
        assert task.id.startswith("world-3/train/") and task.split == "train"
        assert task.answers[0] == task.hops[-1].answer
        for i, hop in enumerate(task.hops):
            (pid,) = hop.passage_ids
            assert pid.startswith("world/train/")
            assert hop.answer in passages[pid].text, (hop, passages[pid])
            if i:  # each sub-question names the previous hop's answer
                assert task.hops[i - 1].answer in hop.question
        if task.num_hops == 1:
            assert task.question == task.hops[0].question
        # the question names its start entity, never an intermediate answer
        assert all(normalize_answer(h.answer) not in normalize_answer(task.question)
                   for h in task.hops)


def test_hop_range_and_counts_are_validated():
    assert {World(WorldConfig(min_hops=2, max_hops=2)).question("test", i).num_hops
            for i in range(20)} == {2}
    with pytest.raises(ValueError, match="WorldConfig.cities"):
        WorldConfig(cities=1)
    with pytest.raises(ValueError, match="max_hops"):
        WorldConfig(max_hops=5)
    with pytest.raises(ValueError, match="World.split='dev': one of"):
        World().question("dev", 0)
    with pytest.raises(IndexError):
        World().entity("train", "city", 30)


CLOSED_TEMPLATES = ("What is the occupation of ", "In which industry does ", "In which country is ")


def test_answer_relations_limit_the_last_hop_to_closed_vocabularies():
    world = World(WorldConfig(min_hops=1, max_hops=2,
                              answer_relations=("occupation", "industry", "country")))
    tasks = world.questions("train", 60)
    asked = {next(t for t in CLOSED_TEMPLATES if task.hops[-1].question.startswith(t))
             for task in tasks}
    assert asked == set(CLOSED_TEMPLATES)
    vocabulary = {*world_module._OCCUPATIONS, *world_module._INDUSTRIES,
                  *(world.country(i) for i in range(world.config.countries))}
    assert {t.answers[0] for t in tasks} <= vocabulary
    assert {t.num_hops for t in tasks} == {1, 2}
    with pytest.raises(ValueError, match=r"WorldConfig.answer_relations=\('salary',\): unknown \['salary'\]"):
        WorldConfig(answer_relations=("salary",))


def test_worlds_without_the_filter_draw_the_questions_they_always_drew():
    # The digest was taken from the world generator before `answer_relations` existed.
    tasks = (World(WorldConfig()).questions("test", 50)
             + World(WorldConfig(seed=3, min_hops=2, max_hops=4)).questions("train", 50))
    digest = hashlib.sha256(repr([(t.question, t.answers) for t in tasks]).encode())
    assert digest.hexdigest()[:16] == "08ae10e7158aa772"


def test_a_million_passage_world_is_lazy_and_its_names_stay_unique():
    world = World(WorldConfig.sized(1_000_000, seed=1))
    assert world.num_passages(("train",)) == world.config.per_split >= 1_000_000
    rng = random.Random(0)
    sample = [world.entity(rng.choice(SPLITS), kind, rng.randrange(world.config.count(kind)))
              for kind in KINDS for _ in range(500)]
    cores = {e.name.split()[-1] if e.kind == "person" else e.name.split()[0] for e in sample}
    assert len(cores) == len({e.id for e in sample})
    streamed = list(itertools.islice(world.passages(("test",)), 3))
    assert [p.id for p in streamed] == [f"world/test/person/{i}" for i in range(3)]
    task = world.question("test", 999_999)
    assert task.hops[-1].answer == task.answers[0]
