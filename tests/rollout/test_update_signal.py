"""Whether a step's update can move anything (`update_has_signal`), for every algorithm preset,
on scripted rollouts of two tasks: the estimator the run uses decides, from its own advantages."""

import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.learner.config import ALGORITHMS, learner_config
from seetjax.learner.update_signal import update_has_signal
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.preferences import rollout_preferences
from seetjax.seet.config import PLAIN_STAGE
from tests.rollout.scripted import ScriptedPolicy
from tests.rollout.test_loop import replay

TASKS = load_tasks("base")[:2]
# progress rewards of (task A's two samples, task B's two samples)
CASES = {"between": ([1.0, 1.0], [0.0, 0.0]),  # equal within each group, differ between them
         "equal": ([0.0, 0.0], [0.0, 0.0]),
         "within": ([1.0, 0.0], [0.0, 0.0])}
# per preset, whether the update moves anything in each case: group baselines (GRPO and its
# variants, RLOO) and DPO's best-over-worst pairs see nothing in equal groups; REINFORCE's batch
# mean does across groups; a KL term, PPO's value baseline and SFT always pull
EXPECTED = {"grpo": (True, True, True),  # kl_coef 0.04 in the loss
            "dapo": (False, False, True), "dr_grpo": (False, False, True),
            "gspo": (False, False, True), "rloo": (False, False, True),
            "gigpo": (True, True, True),  # GRPO's loss, its KL included
            "reinforce": (True, False, True), "ppo": (True, True, True),
            "sft": (True, True, True), "dpo": (False, False, True)}


@pytest.fixture(scope="module")
def results(tokenizer):
    """{case: RolloutResult}: rows 0-1 sample task A, rows 2-3 task B; a reward of 1.0 is every
    turn replayed from the ground truth, 0.0 every turn ended without a call."""
    rollout = Rollout(tokenizer, RolloutConfig(group_size=2, env=BfclEnvConfig(
        prompt_style="compact")))
    out = {}
    for case, rewards in CASES.items():
        scripts = [replay(task) if r else [] for task, pair in zip(TASKS, rewards) for r in pair]
        episodes = rollout.episodes(TASKS, PLAIN_STAGE, progress=0.0, seed=0)
        rollout.play(episodes, ScriptedPolicy(
            tokenizer, lambda row, s=scripts: s[row].pop(0) if s[row] else "Done."))
        out[case] = rollout.slow_loop(episodes, PLAIN_STAGE, step=0)
        assert out[case].rewards().tolist() == [r for pair in rewards for r in pair]
    return out


def signal(spec, result, tokenizer):
    config = learner_config(spec)
    batch = (rollout_preferences(result, tokenizer.pad_id) if config.term("dpo")
             else trajectory_batch(result, pad_id=tokenizer.pad_id))
    return update_has_signal(config, batch)


def test_every_preset_is_covered():
    assert set(EXPECTED) == set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_the_no_signal_rule_follows_each_presets_estimator(algorithm, results, tokenizer):
    spec = {"algorithm": algorithm}
    if algorithm == "dr_grpo":  # its token sums need a fixed normaliser
        spec["loss"] = {"norm_constant": 256.0}
    got = tuple(signal(spec, results[case], tokenizer) for case in CASES)
    assert got == EXPECTED[algorithm], dict(zip(CASES, got))


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce", "rloo"])
def test_a_term_that_always_pulls_gives_signal(algorithm, results, tokenizer):
    without_kl = {"algorithm": algorithm, "loss": {"kl_coef": 0.0}}
    assert signal(without_kl, results["equal"], tokenizer) is False
    entropy = {"algorithm": algorithm, "loss": {"kl_coef": 0.0, "entropy_coef": 0.01}}
    assert signal(entropy, results["equal"], tokenizer) is True
    # GRPO without its KL term: equal groups normalise to 0 whatever differs between them
    assert signal(without_kl, results["between"], tokenizer) is (algorithm == "reinforce")


def test_gigpo_sees_steps_where_grpo_sees_equal_episodes(tokenizer, results):
    """Both samples of each task solve it (progress 1.0: GRPO has nothing to learn), but one
    takes a detour first, a call that changes nothing: from the shared first state its return
    is discounted once more, which GiGPO's step groups see."""
    rollout = Rollout(tokenizer, RolloutConfig(group_size=2, env=BfclEnvConfig(
        prompt_style="compact")))
    scripts = [replay(TASKS[0]), ["[pwd()]"] + replay(TASKS[0]), replay(TASKS[1]),
               replay(TASKS[1])]
    episodes = rollout.episodes(TASKS, PLAIN_STAGE, progress=0.0, seed=0)
    rollout.play(episodes, ScriptedPolicy(
        tokenizer, lambda row: scripts[row].pop(0) if scripts[row] else "Done."))
    detour = rollout.slow_loop(episodes, PLAIN_STAGE, step=0)
    assert detour.rewards().tolist() == [1.0] * 4
    no_kl = {"loss": {"kl_coef": 0.0}}
    assert signal({"algorithm": "grpo", **no_kl}, detour, tokenizer) is False
    assert signal({"algorithm": "gigpo", **no_kl}, detour, tokenizer) is True
    # undiscounted, the detour's return is the other's: nothing to learn again
    undiscounted = {"algorithm": "gigpo", "advantage": {"gamma": 1.0}, **no_kl}
    assert signal(undiscounted, detour, tokenizer) is False
    # and where GRPO's groups see nothing, neither do GiGPO's step groups
    assert [signal({"algorithm": "gigpo", **no_kl}, results[case], tokenizer)
            for case in CASES] == [False, False, True]
