"""A run's evaluations kept in its workdir: cached milestones, after-step files, the prompt check."""

from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs.bfcl.splits import load_split
from seetjax.eval.evaluate import EVAL_STAGE
from seetjax.rl.config import build_plan
from seetjax.rl.evals import RunEvaluations
from seetjax.rl.milestones import Milestone
from tests.rl.test_milestones import AlternatingPolicy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan():
    return build_plan(load_config_file(ROOT / "configs" / "tiny.py"))


@pytest.fixture
def evals(plan, tokenizer, tmp_path):
    return RunEvaluations(tmp_path, plan, tokenizer, load_split("train", per_category=1),
                          {"test": load_split("test", per_category=1)})


def test_a_cached_milestone_is_read_back_without_its_policy(evals, tokenizer):
    first = evals.cached("after_sft", lambda: AlternatingPolicy(tokenizer))
    # each split under each decoding of tiny.py (lenient, official)
    assert (evals.dir / "after_sft.json").exists()
    assert set(first.splits) == {"test", "test (official)"}

    def no_policy():
        raise AssertionError("a kept milestone is not evaluated again")

    assert evals.cached("after_sft", no_policy) == first
    assert Milestone.from_json(first.to_json()) == first


def test_after_step_files_are_kept_with_the_splits_only_and_dropped_after_a_step(evals,
                                                                                 tokenizer):
    training_only = evals.after_step(1, AlternatingPolicy(tokenizer), held_out=False)
    assert training_only.splits == {} and not evals.dir.exists()
    for step in (2, 4, 6):
        evals.after_step(step, AlternatingPolicy(tokenizer), held_out=True)
    assert [m.name for m in evals.steps()] == ["step_2", "step_4", "step_6"]
    evals.drop_after(4)
    assert [m.name for m in evals.steps()] == ["step_2", "step_4"]
    evals.drop_after(0)
    assert evals.steps() == []


def test_prompts_that_leave_no_room_for_a_reply_fail_naming_the_limit(evals):
    longest = max(len(p.prompt) for p in evals.rollout.episodes(
        [*evals.train_tasks, *evals.split_tasks["test"]], EVAL_STAGE, progress=1.0, seed=0))
    evals.check_prompts_fit(evals.train_tasks, longest + 2)
    with pytest.raises(ValueError, match=r"config\.limits\.max_episode_tokens=.*alone has"):
        evals.check_prompts_fit(evals.train_tasks, longest + 1)
    split_longest = max(len(p.prompt) for p in evals.rollout.episodes(
        evals.split_tasks["test"], EVAL_STAGE, progress=1.0, seed=0))
    with pytest.raises(ValueError, match="alone has"):  # the splits' prompts count too
        evals.check_prompts_fit([], split_longest + 1)


def test_only_process_0_writes_or_drops_files(evals, tokenizer, monkeypatch):
    evals.after_step(2, AlternatingPolicy(tokenizer), held_out=True)
    monkeypatch.setattr("jax.process_index", lambda: 1)
    evals.cached("after_sft", lambda: AlternatingPolicy(tokenizer))
    evals.after_step(4, AlternatingPolicy(tokenizer), held_out=True)
    evals.drop_after(0)
    assert sorted(p.name for p in evals.dir.iterdir()) == ["step_2.json"]
