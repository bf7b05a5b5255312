"""qa_search in run configs: its env section, task-side checks and errors naming the field."""

from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs import registry
from seetjax.envs.qa_search.env import QASearchEnv
from seetjax.envs.qa_search.run import QASearchRunConfig
from seetjax.rl.config import build_plan, env_section

ROOT = Path(__file__).resolve().parents[3]


def qa_config():
    return load_config_file(ROOT / "configs" / "qa_search.py")


def test_the_shipped_config_builds_its_plan():
    plan = build_plan(qa_config())
    assert isinstance(plan.rollout.env, QASearchRunConfig)
    assert plan.rollout.reward.kind == "env" and plan.eval_decodings == ()
    assert plan.eval_splits == {"test": qa_config().eval.per_category}


def test_environments_share_one_retriever_and_load_questions_by_split():
    section = QASearchRunConfig(world_passages=40, max_hops=2)
    a, b = registry.make_env(section), registry.make_env(section)
    assert isinstance(a, QASearchEnv) and a is not b and a.retriever is b.retriever
    load = registry.spec("qa_search").load_tasks
    train, test = load(section, {}, "train", 3), load(section, {}, "test", 3)
    assert [t.split for t in train + test] == ["train"] * 3 + ["test"] * 3
    assert all(1 <= t.num_hops <= 2 for t in train + test)


@pytest.mark.parametrize("override, message", [
    (("data", "categories", "base"), r"config.data.categories='base': unknown field\(s\) "
     r"\['categories'\] for "
                                     r"env.name='qa_search'"),
    (("data", "split", "validation"), r"config.data.split='validation': the world corpus's "
                                      r"splits are \('train', 'test'\)"),
    (("data", "tasks_per_category", 0), "config.data.tasks_per_category=0: the synthetic world"),
    (("eval", "splits", "train,dev"), "config.eval.splits='dev'"),
    (("eval", "per_category", 0), "config.eval.per_category=0"),
    (("eval", "decodings", "lenient"), "config.eval.decodings='lenient': environment "
                                       "'qa_search' reads replies one way"),
    (("env", "corpus", "wiki"), r"config.env: QASearchRunConfig.corpus='wiki': "
     r"one of \('world', 'web_search'\)"),
    (("env", "search_budget", 0), "config.env: QASearchRunConfig.search_budget=0"),
    (("env", "max_hops", 5), r"config.env: WorldConfig.max_hops=5: must be in \[min_hops=1, 4\]"),
    (("env", "shards", 2), r"config.env.shards=2: unknown field\(s\) \['shards'\]"),
    (("env", "answer_relations", "salary"), r"config.env: WorldConfig.answer_relations=\('salary',\): "
                                            r"unknown \['salary'\]"),
    (("env", "corpus", "web_search"), "config.env: QASearchRunConfig.answer_relations='occupation,industry,"
                                      "country': only the world corpus"),
])
def test_bad_qa_configs_fail_with_the_field_named(override, message):
    config = qa_config()
    *path, key, value = override
    section = config
    for name in path:
        section = section[name]
    section[key] = value
    with pytest.raises(ValueError, match=message):
        build_plan(config)


def test_web_search_has_a_test_split_only():
    config = qa_config()
    config.env.corpus = "web_search"
    config.env.answer_relations = ""  # the world's question filter
    config.data.split = "test"
    build_plan(config)
    config.data.split = "train"
    with pytest.raises(ValueError, match=r"config.data.split='train': the web_search corpus's "
                                         r"splits are \('test',\)"):
        build_plan(config)


def test_the_env_reward_needs_an_environment_that_scores_episodes():
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.reward.kind = "env"
    with pytest.raises(ValueError, match="config.reward.kind='env': environment 'bfcl'"):
        build_plan(config)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['shards'\]"):
        env_section("qa_search", shards=2)


def test_the_oracle_sft_source_is_validated_with_its_field_named():
    from seetjax.sft.config import validate

    sft = qa_config().sft.run
    validate(sft)
    sft.data.tasks_per_category = 0
    with pytest.raises(ValueError, match="config.data.tasks_per_category=0"):
        validate(sft)
    sft.data.tasks_per_category = 4
    sft.data.qa_search.corpus = "wiki"
    with pytest.raises(ValueError, match="config.data.qa_search: QASearchRunConfig.corpus='wiki'"):
        validate(sft)
    sft.data.qa_search.corpus = "world"
    sft.data.eval_split = "validation"
    with pytest.raises(ValueError, match="config.data.eval_split='validation'"):
        validate(sft)
