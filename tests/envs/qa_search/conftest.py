"""Small worlds and retrievers shared by the QA search tests (built once per session)."""

import pytest

from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.env import QASearchEnv
from seetjax.envs.qa_search.retriever import PassageRetriever
from seetjax.envs.qa_search.world import World, WorldConfig


@pytest.fixture(scope="session")
def world() -> World:
    return World(WorldConfig(seed=3))


@pytest.fixture(scope="session")
def world_retriever(world) -> PassageRetriever:
    return PassageRetriever(world.passages(), QASearchConfig().retrieval)


@pytest.fixture
def env(world_retriever) -> QASearchEnv:
    return QASearchEnv(world_retriever, QASearchConfig(search_budget=3, max_steps=6))
