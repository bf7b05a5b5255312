"""The QA search environment in training runs: its `env` section, one retriever per process, its
task loader and task-side checks (`qa_search_spec`, registered as `env.name=qa_search`).

The section (`QASearchRunConfig`) is `QASearchConfig` plus the corpus: `corpus="world"` (the
seeded synthetic world, `world_passages` passages per split, `min_hops`..`max_hops` questions
whose last hop asks one of `answer_relations` (comma-separated; '' = any), train/test with
disjoint entities) or `"web_search"` (BFCL v4's 100 questions, split "test" only,
with `distractors` world passages). The retriever indexes both splits' passages once per process
(`retriever`, cached by corpus and retrieval settings); every episode's environment shares it.

A run's `data` section holds `split`, `tasks_per_category` (questions: the first N of the split;
the world's splits have no end, so N > 0) and `tasks_per_step`; nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping
from typing import Any

from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.env import QASearchEnv
from seetjax.envs.qa_search.retriever import PassageRetriever, RetrieverSettings
from seetjax.envs.qa_search.web_search import load_web_search
from seetjax.envs.qa_search.world import SPLITS, World, WorldConfig
from seetjax.errors import invalid, require_int

NAME = "qa_search"
CORPORA = {"world": SPLITS, "web_search": ("test",)}  # corpus -> its splits
DATA_FIELDS = ("split", "tasks_per_category", "tasks_per_step")


@dataclasses.dataclass(frozen=True)
class QASearchRunConfig(QASearchConfig):
    """`QASearchConfig` and the corpus (see the module docstring)."""

    corpus: str = "world"
    world_seed: int = 0
    world_passages: int = 200
    min_hops: int = 1
    max_hops: int = 4
    answer_relations: str = ""
    distractors: int = 200

    def __post_init__(self):
        super().__post_init__()
        if self.corpus not in CORPORA:
            raise invalid(self, "corpus", self.corpus, f"one of {tuple(CORPORA)}")
        for name, least in (("world_seed", 0), ("world_passages", 2), ("distractors", 0)):
            require_int(self, name, getattr(self, name), least)
        if not isinstance(self.answer_relations, str):
            raise invalid(self, "answer_relations", self.answer_relations, "comma-separated "
                             "relation names in one string ('' = any)")
        if self.corpus != "world" and self.answer_relations:
            raise invalid(self, "answer_relations", self.answer_relations, "only the world corpus "
                             f"draws its questions (corpus={self.corpus!r})")
        _ = self.world  # WorldConfig checks the hop range and the relation names

    @property
    def world(self) -> WorldConfig:
        return WorldConfig.sized(self.world_passages, seed=self.world_seed,
                                 min_hops=self.min_hops, max_hops=self.max_hops,
                                 answer_relations=tuple(
                                     r.strip() for r in self.answer_relations.split(",")
                                     if r.strip()))


@functools.lru_cache(maxsize=4)
def retriever(corpus: str, world: WorldConfig, distractors: int,
              settings: RetrieverSettings) -> PassageRetriever:
    """The corpus's retriever, built once per process for each corpus and settings."""
    if corpus == "world":
        return PassageRetriever(World(world).passages(), settings)
    return PassageRetriever(load_web_search(distractors, world.seed).passages, settings)


def make_env(section: QASearchRunConfig) -> QASearchEnv:
    return QASearchEnv(retriever(section.corpus, section.world, section.distractors,
                                 section.retrieval), section)


def load_tasks(section: QASearchRunConfig, data: Mapping[str, Any], split: str,
               count: int | None) -> list[QATask]:
    """The first `count` questions of `split` (web_search: all of them when None)."""
    if section.corpus == "world":
        if not count:
            raise invalid("load_tasks", "count", count, "the synthetic world's splits have no end: "
                          "give a count > 0")
        return World(section.world).questions(split, count)
    return list(itertools.islice(load_web_search(section.distractors, section.world_seed).tasks,
                                 count))


def check_data(section: QASearchRunConfig, data: Mapping[str, Any],
               eval_splits: Mapping[str, int]) -> None:
    """The task side of a qa_search run (`EnvSpec.check_data`), each field named."""
    unknown = sorted(set(data) - set(DATA_FIELDS))
    if unknown:
        raise invalid("config.data", unknown[0], data[unknown[0]], f"unknown field(s) {unknown} "
                      f"for env.name={NAME!r}; known: "
                         f"{list(DATA_FIELDS)}")
    check_split(section, data["split"], data["tasks_per_category"], "data.split",
                "data.tasks_per_category")
    for split, count in eval_splits.items():
        check_split(section, split, count, "eval.splits", "eval.per_category")


def check_split(section: QASearchRunConfig, split: str, count: int, split_field: str,
                count_field: str) -> None:
    """Fails, naming `split_field` or `count_field`, where loading `count` questions of `split`
    from the section's corpus would."""
    splits = CORPORA[section.corpus]
    if split not in splits:
        raise invalid("config", split_field, split, f"the {section.corpus} corpus's "
                         f"splits are {splits}")
    if section.corpus == "world" and not count:
        raise invalid("config", count_field, count, "the synthetic world's splits have "
                         "no end; give a count > 0")
