"""The oracle policy: with the gold hop queries, EM = 1 in exactly as many searches as hops."""

from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs.base import StepCode
from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.env import QASearchEnv, gold_calls
from seetjax.envs.qa_search.oracle import oracle_calls, play_oracle
from seetjax.envs.qa_search.reward import exact_match
from seetjax.envs.qa_search.web_search import load_web_search
from seetjax.rl.config import build_plan

ROOT = Path(__file__).resolve().parents[3]


def _check_oracle(env, task):
    steps = play_oracle(env, task)
    assert len(steps) == task.num_hops + 1 and steps[-1].done
    for hop, step in zip(task.hops, steps):
        assert step.code == StepCode.CLEAN_CALL
        text = step.observations[0]["content"]
        # the evidence is in what the search returned: the gold passage and the hop's answer
        assert f"(doc {hop.passage_ids[0]}," in text and hop.answer in text
    return env.reward()


def test_oracle_on_the_synthetic_world(world_retriever, world):
    env = QASearchEnv(world_retriever)  # a budget of 6 searches: room for 4 hops
    tasks = world.questions("train", 40) + world.questions("test", 40)
    assert {t.num_hops for t in tasks} == {1, 2, 3, 4}
    for task in tasks:
        parts = _check_oracle(env, task)
        assert parts.exact_match == 1.0 and parts.searches == task.num_hops
        assert parts.format == 1.0 and env.trace().verdicts[0].passed


def test_the_spaced_oracle_answer_has_the_passage_tokens_and_scores_the_same(
        world_retriever, world, tokenizer):
    env = QASearchEnv(world_retriever, QASearchConfig(oracle_spaced_answer=True))
    for task in world.questions("train", 12):
        steps = play_oracle(env, task)
        assert env.reward().exact_match == 1.0 and env.trace().verdicts[0].passed
        answer = task.hops[-1].answer
        reply = env.history[-1]["content"]
        assert reply == f"[answer(text=' {answer}')]"
        passage = steps[-2].observations[0]["content"]
        # the answer's tokens, as the reply has them, appear in that order in the passage
        tokens = tokenizer.hf.encode(reply)
        quote = tokens.index(tokenizer.hf.encode("='")[0]) + 1
        spelled = tokens[quote:quote + len(tokenizer.hf.encode(f" {answer}"))]
        assert spelled == tokenizer.hf.encode(f" {answer}")
        found = tokenizer.hf.encode(passage)
        assert any(found[i:i + len(spelled)] == spelled for i in range(len(found)))


def test_oracle_on_web_search():
    data = load_web_search(distractors=100)
    env = QASearchEnv.from_passages(data.passages)
    consistent = 0
    for task in data.tasks:
        parts = _check_oracle(env, task)
        assert parts.searches == task.num_hops
        # BFCL's last hop disagrees with its answer in some entries (see web_search's docstring)
        if exact_match(task.hops[-1].answer, task.answers):
            consistent += 1
            assert parts.exact_match == 1.0
    assert consistent == 78


def test_a_rechecking_oracle_repeats_the_last_search_of_the_drawn_share(world_retriever, world):
    tasks = world.questions("train", 60)
    assert oracle_calls(tasks[0], QASearchConfig()) == gold_calls(tasks[0])
    env = QASearchEnv(world_retriever, QASearchConfig(oracle_recheck=1.0))
    for task in tasks[:8]:
        steps = play_oracle(env, task)
        assert env.reward().exact_match == 1.0 and env.reward().searches == task.num_hops + 1
        # the repeat is the last hop's search again, and it finds what that one did
        assert steps[-2].observations[0]["content"].split("\n", 1)[1] == \
            steps[-3].observations[0]["content"].split("\n", 1)[1]
        assert env.trace().ground_truth == (gold_calls(task),)  # the gold never rechecks
    half = QASearchConfig(oracle_recheck=0.5)
    drawn = [len(oracle_calls(t, half)) > len(gold_calls(t)) for t in tasks]
    assert 15 <= sum(drawn) <= 45  # a binomial(60, 0.5) draw, beyond 4 std of 30 otherwise
    assert drawn == [len(oracle_calls(t, half)) > len(gold_calls(t)) for t in tasks]
    # a higher share rechecks a superset of the tasks
    more = [len(oracle_calls(t, QASearchConfig(oracle_recheck=0.8))) > len(gold_calls(t))
            for t in tasks]
    assert all(m for d, m in zip(drawn, more) if d) and sum(more) > sum(drawn)
    # no recheck where it would run past the search budget or the step limit
    (one_hop,) = [t for t in tasks if t.num_hops == 1][:1]
    for tight in (QASearchConfig(oracle_recheck=1.0, search_budget=1),
                  QASearchConfig(oracle_recheck=1.0, max_steps=2)):
        assert oracle_calls(one_hop, tight) == gold_calls(one_hop)
    assert len(oracle_calls(one_hop, QASearchConfig(oracle_recheck=1.0, search_budget=2,
                                                    max_steps=3))) == 3


@pytest.mark.parametrize("value", [-0.1, 1.5, True, "half"])
def test_oracle_recheck_outside_the_unit_interval_names_the_field(value):
    with pytest.raises(ValueError, match="oracle_recheck"):
        QASearchConfig(oracle_recheck=value)


def test_the_recheck_config_shares_its_env_section_with_the_warm_up():
    config = load_config_file(ROOT / "configs" / "qa_search_recheck.py")
    assert build_plan(config).rollout.env.oracle_recheck == 0.6
    assert config.sft.run.data.qa_search.oracle_recheck == 0.6  # the demonstrations recheck
    config.env.oracle_recheck = 2.0
    with pytest.raises(ValueError, match=r"oracle_recheck=2\.0"):
        build_plan(config)
