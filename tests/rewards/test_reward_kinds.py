"""Rewards as a run choice (`reward.kind`), end to end on scripted episodes: rollout with a
ScriptedPolicy -> TrajectoryBatch token rewards on the replies they score -> advantages."""

import dataclasses
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.learner.config import learner_config
from seetjax.learner.update_signal import update_has_signal
from seetjax.losses import advantages as adv
from seetjax.rewards import (
    AgentRewardConfig,
    RewardConfig,
    ShapingConfig,
    agent_reward,
    assigned_rewards,
    gaming_metrics,
    placed_rewards,
    progress_reward,
    step_rewards,
)
from seetjax.rl.config import build_plan
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.seet.config import StageConfig, default_stages
from tests.rollout.scripted import ScriptedPolicy

TASK = load_tasks("base")[0]  # turns: [cd, mkdir, mv], [cd, grep], [sort], [diff]
STANDARD = StageConfig(stage=4, env_mode="standard", retry_budget=0, retry_probability_start=0.0,
                       retry_probability_end=0.0)
AUGMENTED = StageConfig(stage=1, env_mode="augmented", retry_budget=1)
ROOT = Path(__file__).resolve().parents[2]


def calls(turn):
    return "[" + ", ".join(c.to_python() for c in TASK.ground_truth[turn]) + "]"


PERFECT = [m for t in range(TASK.num_turns) for m in (calls(t), "Done.")]
GROUP = [PERFECT, PERFECT[:4] + ["Done."] * 2, ["[cd(folder='nope')]", "[cd(folder="] + PERFECT]
KINDS = {"progress": RewardConfig(),
         "agent": RewardConfig("agent", agent=AgentRewardConfig(format_error_penalty=0.3)),
         "shaped": RewardConfig("shaped", shaping=ShapingConfig(clean_call=-0.05, turn_failed=-0.3)),
         "shaped per message": RewardConfig("shaped", shaping=ShapingConfig(
             clean_call=-0.05, turn_failed=-0.3, per_turn=False))}


def play(tokenizer, scripts, kind, stage=STANDARD, limits=None, **env):
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=len(scripts), env=BfclEnvConfig(prompt_style="compact", **env),
        limits=limits or EpisodeLimits(), reward=KINDS[kind]))
    episodes = rollout.episodes([TASK], stage, progress=0.0, seed=0)
    queues = [list(s) for s in scripts]
    rollout.play(episodes, ScriptedPolicy(
        tokenizer, lambda row: queues[row].pop(0) if queues[row] else "Done."))
    return rollout.slow_loop(episodes, stage, step=0)


def reply_ends(episode):
    """Training-sequence position of the last token of each segment that is a reply (in the
    training sequence), by segment index: computed here from the segments alone."""
    ends, position = {}, 0
    for i, s in enumerate(episode.conversation.segments):
        if s.in_training:
            position += len(s.ids)
            if s.kind == "reply":
                ends[i] = position - 1
    return ends


def expected_rewards(episode, reward):
    """{position: reward} as the kind defines it (`reward`, a RewardConfig), from the trace and
    the step->reply map."""
    trace, ends = episode.trace(), reply_ends(episode)
    if reward.kind == "shaped":
        out = {}
        shaping = reward.shaping
        for step, r in placed_rewards(dataclasses.replace(trace, truncated=False), shaping):
            end = ends[episode.step_replies[step]]
            out[end] = out.get(end, 0.0) + r
        if trace.truncated:  # the cut-off's timeout: on the episode's last reply
            last = max(ends.values())
            out[last] = out.get(last, 0.0) + shaping.timeout
        return out
    value = (progress_reward(trace) if reward.kind == "progress"
             else agent_reward(trace, reward.agent).total)
    return {max(ends.values()): value}


@pytest.fixture(scope="module", params=list(KINDS))
def rolled(request, tokenizer):
    result = play(tokenizer, GROUP, request.param)
    return request.param, result, trajectory_batch(result, pad_id=tokenizer.pad_id,
                                                   row_multiple=4)


def test_rewards_sit_on_the_last_token_of_the_replies_they_score(rolled):
    kind, result, batch = rolled
    for i, e in enumerate(result.episodes):
        assert len(e.step_replies) == len(e.trace().steps)
        want = expected_rewards(e, KINDS[kind])
        marked = np.flatnonzero(batch.reward_mask[i])
        assert marked.tolist() == sorted(want)
        np.testing.assert_allclose(batch.token_rewards[i, marked], [want[p] for p in marked],
                                   rtol=1e-6)
        assert not batch.token_rewards[i][batch.reward_mask[i] == 0].any()
        assert batch.rewards[i] == pytest.approx(sum(want.values()), abs=1e-6)
        # every reward sits on a generated token; an episode reward on the last trained one
        assert (batch.sequences.loss_mask[i, marked] == 1).all()
        if KINDS[kind].kind != "shaped":
            assert marked[-1] == np.flatnonzero(batch.sequences.loss_mask[i])[-1]
    assert not batch.reward_mask[3].any() and batch.rewards[3] == 0  # the padding row
    if kind == "shaped per message":  # one step per reply here: every reply is scored
        replies = [sum(s.kind == "reply" for s in e.conversation.segments)
                   for e in result.episodes]
        assert [int(m.sum()) for m in batch.reward_mask[:3]] == replies == [8, 6, 8]
    if kind == "shaped":  # one reward per turn, on the reply that ended it, however many it took
        assert [int(m.sum()) for m in batch.reward_mask[:3]] == [TASK.num_turns] * 3


def test_stats_log_the_chosen_reward_and_progress(rolled):
    kind, result, _ = rolled
    stats = result.stats()
    progress = [progress_reward(e.trace()) for e in result.episodes]
    assert stats["progress"] == pytest.approx(np.mean(progress))
    assert stats["reward"] == pytest.approx(np.mean(result.rewards()))
    if kind == "progress":
        assert result.rewards().tolist() == pytest.approx(progress)


def test_stats_log_the_hack_detectors(tokenizer):
    """A harmless call in a turn it does not advance, and silence, each in their own metric."""
    scripts = [PERFECT[:2] + ["[ls()]", "Done."] + PERFECT[4:], PERFECT[:2] + ["Done."] + PERFECT[4:],
               PERFECT]
    result = play(tokenizer, scripts, "shaped")
    stats = result.stats()
    assert stats["unproductive_turns"] == pytest.approx(1 / 12)  # 3 episodes, 4 checked turns
    assert stats["silent_turns"] == pytest.approx(1 / 12)
    assert stats["unproductive_turns"] == gaming_metrics(
        [e.trace() for e in result.episodes])["unproductive_turns"]


def _trained_replies(episode):
    """(segment index, training-sequence positions of its trained tokens) per trained reply."""
    out, position = [], 0
    for i, s in enumerate(episode.conversation.segments):
        if s.in_training:
            if s.trained:
                out.append((i, list(range(position, position + len(s.ids)))))
            position += len(s.ids)
    return out


def _step_lists(result):
    """Per episode: [(reply position, reward)] in order, from the expected layout."""
    return [sorted(expected_rewards(e, result.reward).items()) for e in result.episodes]


def test_grpo_advantages_follow_the_step_rewards(rolled):
    """DeepSeekMath's process supervision on the trained tokens of each reply: the sum of the
    group-normalised rewards of that reply and the ones after it; one reward per episode gives
    every trained token the episode's outcome advantage."""
    _, result, batch = rolled
    cfg = adv.GRPOAdvantageConfig()
    valid = (batch.sequences.segment_ids != 0).any(1).astype(np.float32)
    got, _ = adv.grpo_advantages(jnp.asarray(batch.token_rewards), jnp.asarray(batch.reward_mask),
                                 jnp.asarray(batch.group_ids), jnp.asarray(valid), cfg)
    steps = _step_lists(result)
    pooled = np.array([r for row in steps for _, r in row], np.float64)
    norm = (pooled - pooled.mean()) / (pooled.std(ddof=1) + cfg.eps)
    k = 0
    for i, e in enumerate(result.episodes):
        row = norm[k:k + len(steps[i])]
        k += len(steps[i])
        for _, positions in _trained_replies(e):
            for t in positions:
                later = [n for (p, _), n in zip(steps[i], row) if p >= t]
                assert float(got[i, t]) == pytest.approx(sum(later), abs=1e-4)


def test_rloo_and_gae_credit_each_reply_with_the_rewards_from_it_on(rolled):
    _, result, batch = rolled
    valid = (batch.sequences.segment_ids != 0).any(1).astype(np.float32)
    args = [jnp.asarray(a) for a in (batch.token_rewards, batch.reward_mask, batch.group_ids,
                                     valid)]
    rloo, _ = adv.rloo_advantages(*args, adv.RLOOAdvantageConfig())
    mask = jnp.asarray(batch.sequences.loss_mask)
    # GAE with gamma = lambda = 1 and zero values is the reward to go over the trained tokens
    gae, _ = adv.gae_advantages(adv.credit_to_trained(args[0], mask), jnp.zeros_like(mask),
                                mask, adv.GAEConfig(gamma=1.0, lam=1.0, whiten=False))
    steps = _step_lists(result)
    returns = [sum(r for _, r in row) for row in steps]
    for i, e in enumerate(result.episodes):
        baseline = np.mean([returns[j] for j in range(3) if j != i])
        for _, positions in _trained_replies(e):
            for t in positions:
                to_go = sum(r for p, r in steps[i] if p >= t)
                assert float(rloo[i, t]) == pytest.approx(to_go - baseline, abs=1e-5)
                assert float(gae[i, t]) == pytest.approx(to_go, abs=1e-5)


def has_signal(tokenizer, result, algorithm):
    """`update_has_signal` of `algorithm`, its KL term off, on `result`'s batch."""
    config = learner_config({"algorithm": algorithm, "loss": {"kl_coef": 0.0}})
    return update_has_signal(config, trajectory_batch(result, pad_id=tokenizer.pad_id))


def test_has_signal_with_equal_and_with_step_rewards(tokenizer):
    same = play(tokenizer, [PERFECT, PERFECT], "progress")
    assert not has_signal(tokenizer, same, "rloo")  # equal episode rewards: nothing to learn
    assert has_signal(tokenizer, play(tokenizer, [PERFECT, PERFECT[:2]], "progress"), "rloo")
    shaped = play(tokenizer, [PERFECT, PERFECT], "shaped per message")  # -0.05, 1, ...: differ
    assert has_signal(tokenizer, shaped, "rloo") and has_signal(tokenizer, shaped, "grpo")
    # one reward per turn, each turn -0.05 + 1: GRPO normalises them to 0, the reward to go differs
    per_turn = play(tokenizer, [PERFECT, PERFECT], "shaped")
    assert has_signal(tokenizer, per_turn, "rloo") and not has_signal(tokenizer, per_turn, "grpo")
    # every reward the same (a turn failed without a call, four times): GRPO normalises them all
    # to 0, while the reward to go still differs between the replies of an episode
    failing = play(tokenizer, [["Done."] * 4] * 2, "shaped")
    silent = KINDS["shaped"].shaping.turn_failed + KINDS["shaped"].shaping.unattempted_turn
    assert [r for rows in failing.scored for _, r in rows] == pytest.approx([silent] * 8)
    assert has_signal(tokenizer, failing, "rloo") and not has_signal(tokenizer, failing, "grpo")


# ---- the places where steps and replies do not pair one to one ---------------------------------

@pytest.fixture(scope="module")
def capped(tokenizer):
    # "[pwd()]" and its stop token are 7 tokens: the fifth reply of a turn spends its budget
    return play(tokenizer, [["[pwd()]"] * 50], "shaped per message",
                limits=EpisodeLimits(max_turn_tokens=35))


def test_a_turn_ended_by_its_token_cap_is_scored_on_the_reply_that_spent_it(capped, tokenizer):
    """The environment's step that ends the turn is the doing of the reply that spent the turn's
    token budget: both steps' rewards sit on that reply's last token."""
    (e,) = capped.episodes
    trace = e.trace()
    early = next(k for k, s in enumerate(trace.steps) if s.verdicts)
    assert early == 5 and trace.steps[early].code.name == "NO_CALL"
    assert e.step_replies[early] == e.step_replies[early - 1]  # no reply of its own
    batch = trajectory_batch(capped, pad_id=tokenizer.pad_id)
    end = reply_ends(e)[e.step_replies[early]]
    shaping = KINDS["shaped per message"].shaping
    rewards = step_rewards(trace, shaping)
    assert batch.token_rewards[0, end] == pytest.approx(rewards[early - 1] + rewards[early])
    assert int(batch.reward_mask[0].sum()) == len(set(e.step_replies)) == len(trace.steps) - 4


def test_intercepted_replies_have_no_step_and_retried_ones_keep_theirs(tokenizer):
    stage2 = default_stages()[1]  # interception on; a retried attempt is masked
    result = play(tokenizer, [["[cd(folder='wrong')]"] + PERFECT], "shaped per message",
                  stage=stage2)
    (e,) = result.episodes
    assert e.turns[0].interceptions == 1
    assert 1 not in e.step_replies  # segment 1, the intercepted reply, read no step
    assert len(e.step_replies) == len(e.trace().steps)
    result = play(tokenizer, [["[cd(folder='nope')]"] + PERFECT], "shaped per message",
                  stage=AUGMENTED)
    (e,) = result.episodes
    retried = e.conversation.segments[e.step_replies[0]]
    assert retried.masked and e.trace().steps[0].code.name == "EXECUTION_ERROR"
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    end = reply_ends(e)[e.step_replies[0]]
    # the failed attempt's reward sits on its own (untrained) last token
    assert batch.reward_mask[0, end] == 1 and batch.sequences.loss_mask[0, end] == 0
    assert batch.token_rewards[0, end] == pytest.approx(
        KINDS["shaped per message"].shaping.execution_error)


def test_a_dropped_attempt_is_undone_and_its_step_with_it(tokenizer):
    drop = StageConfig(stage=1, retry_budget=1, training_context="drop")
    result = play(tokenizer, [["[mkdir(dir_name='x'), cd(folder='nope')]"] + PERFECT],
                  "progress", stage=drop)
    (e,) = result.episodes
    assert len(e.step_replies) == len(e.trace().steps) == 8  # the undone step is not in it
    assert not e.conversation.segments[1].in_training and 1 not in e.step_replies
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    assert np.flatnonzero(batch.reward_mask[0]).tolist() == [max(reply_ends(e).values())]


def test_a_cut_off_episode_pays_its_timeout_at_its_end(tokenizer):
    limits = EpisodeLimits(max_turn_tokens=10_000, max_episode_tokens=1200)
    result = play(tokenizer, [PERFECT[:2] + ["[pwd()]"] * 300], "shaped", limits=limits)
    (e,) = result.episodes
    trace = e.trace()
    assert trace.truncated
    scored = assigned_rewards(trace, KINDS["shaped"])
    assert scored[-1] == (None, KINDS["shaped"].shaping.timeout)
    assert sum(r for _, r in scored) == pytest.approx(sum(step_rewards(trace, KINDS["shaped"].shaping)))
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    want = expected_rewards(e, KINDS["shaped"])
    marked = np.flatnonzero(batch.reward_mask[0])
    assert marked.tolist() == sorted(want) and marked[-1] == max(reply_ends(e).values())
    np.testing.assert_allclose(batch.token_rewards[0, marked], [want[p] for p in marked], rtol=1e-6)


# ---- the run config ----------------------------------------------------------------------------

@pytest.mark.parametrize("override,message", [
    (("kind", "sparse"), r"config.reward: RewardConfig.kind='sparse': one of \('progress', 'agent', "),
    (("agent", "completion_mode", "all"), "config.reward.agent: AgentRewardConfig.completion_mode='all': "
     "one of"),
    (("agent", "timeout_penalty", float("nan")),
     "config.reward.agent.timeout_penalty=nan: must be a finite number"),
    (("shaping", "timeout", float("inf")),
     "config.reward.shaping.timeout=inf: must be a finite number"),
    (("shaping", "turn_penalty_floor", 0.2),
     r"config.reward.shaping: ShapingConfig.turn_penalty_floor=0.2: must be <= 0"),
    (("shaping", "clean_call", 0.1),
     r"config.reward.shaping: ShapingConfig.clean_call=0.1: must be <= 0: a positive code "
     r"value pays"),
])
def test_bad_reward_fields_fail_with_the_field_named(override, message):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    *path, key, value = override
    section = config.reward
    for name in path:
        section = section[name]
    section[key] = value
    with pytest.raises(ValueError, match=message):
        build_plan(config)


def test_unknown_reward_fields_and_shaped_dpo_are_refused():
    config = load_config_file(ROOT / "configs" / "tiny.py")
    with config.reward.shaping.unlocked():
        config.reward.shaping.bonus = 1.0
    with pytest.raises(ValueError, match=r"config.reward.shaping.bonus=1.0: unknown field\(s\) \['bonus'\]"):
        build_plan(config)
    config = load_config_file(ROOT / "configs" / "dpo.py")
    config.reward.kind = "shaped"
    with pytest.raises(ValueError, match="config.reward.kind='shaped': with learner.algorithm="
                                         "'dpo'"):
        build_plan(config)
    config.reward.kind = "agent"  # an episode reward ranks DPO's pairs
    assert build_plan(config).rollout.reward.kind == "agent"


def test_the_plan_carries_the_reward_to_training_and_evaluation_rollouts():
    config = load_config_file(ROOT / "configs" / "tiny.py")
    assert build_plan(config).rollout.reward == RewardConfig()  # the default: progress
    config.reward.kind = "shaped"
    config.reward.shaping.turn_failed = -0.25
    config.reward.shaping.turn_penalty_floor = float("-inf")  # no floor: the one unbounded field
    plan = build_plan(config)
    assert plan.rollout.reward == plan.eval_rollout.reward == RewardConfig(
        "shaped", shaping=ShapingConfig(turn_failed=-0.25, turn_penalty_floor=float("-inf")))
