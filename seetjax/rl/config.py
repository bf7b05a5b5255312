"""A training run's ml_collections config -> validated plan objects, before anything loads.

Every section becomes the dataclass that uses it (StageConfig, Transition, LearnerConfig,
RolloutConfig, SamplingParams, ...); a bad value, an unknown field in a section, or an impossible
combination fails here with the field named (`config.seet.stage2.retry_budget: ...`), so a run
never compiles or rolls out on a config it would later reject.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, get_type_hints

import ml_collections

from seetjax.config.fields import as_dataclass, check_finite, checked_field
from seetjax.config.sections import generated_section, lora_section
from seetjax.envs import registry
from seetjax.envs.bfcl.data import CATEGORIES
from seetjax.envs.bfcl.env import DECODINGS
from seetjax.envs.state_keys import KeyedState
from seetjax.errors import invalid, require_int
from seetjax.learner.config import LearnerConfig, learner_config
from seetjax.models.hf import LOAD_FIELDS
from seetjax.rewards import AgentRewardConfig, RewardConfig, ShapingConfig
from seetjax.rl.alarms import AlarmConfig
from seetjax.rl.importance import check_importance_ratios, with_stale_token_weights
from seetjax.rl.schedule import FIELDS as SCHEDULE_FIELDS
from seetjax.rl.schedule import ScheduleConfig, schedule_of
from seetjax.rl.start_model import model_options
from seetjax.rollout.branching import BranchConfig
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import RolloutConfig
from seetjax.rollout.multi_agent import ROLES, MultiAgentConfig
from seetjax.sampling import SamplingParams
from seetjax.seet.config import PLAIN_STAGE, StageConfig, default_stages
from seetjax.seet.curriculum import Transition, configured_stages


def reward_section() -> ml_collections.ConfigDict:
    """`reward` of run configs (seetjax.rewards.RewardConfig): `kind` picks the reward trained on
    (one of seetjax.rewards.REWARD_KINDS: "progress", EnvTuning's; "agent", the five-part agent reward with
    penalties; "shaped", one reward per step); `agent` and `shaping` hold every field of
    AgentRewardConfig and ShapingConfig."""
    return ml_collections.ConfigDict(dict(
        kind="progress", agent=dataclasses.asdict(AgentRewardConfig()),
        shaping=dataclasses.asdict(ShapingConfig())))


def reward_of(config: ml_collections.ConfigDict) -> RewardConfig:
    """The RewardConfig of a run config, every field named when it fails (`config.reward.*`)."""
    section = config.reward
    agent = as_dataclass(AgentRewardConfig, section.agent.to_dict(), "reward.agent")
    shaping = as_dataclass(ShapingConfig, section.shaping.to_dict(), "reward.shaping")
    reward = checked_field("reward", lambda: RewardConfig(section.kind, agent, shaping))
    if reward.stepwise and config.learner.get("algorithm", "grpo") == "dpo":
        raise invalid(
            "config.reward", "kind", reward.kind, "with learner.algorithm='dpo': DPO learns from "
            "preferences between whole episodes, so per-step rewards would only be summed into "
            "the return that ranks them; use reward.kind='progress' or 'agent', or a "
            "policy-gradient algorithm, which credits each step's reward to its tokens")
    return reward


def env_of(config: ml_collections.ConfigDict) -> Any:
    """The environment section of a run config: `env.name` (default "bfcl") picks the registered
    environment (`seetjax.envs.registry`), the rest of `env` is its section's fields."""
    if "env" not in config:
        raise invalid("config", "env", None, "missing; a run config needs its environment's section "
                      f"(env.name, one of {registry.names()}, and its fields)")
    values = config.env.to_dict()
    name = values.pop("name", registry.DEFAULT)
    spec = checked_field("env.name", lambda: registry.spec(name))
    return as_dataclass(spec.config, values, "env")


def env_section(name: str, **fields: Any) -> ml_collections.ConfigDict:
    """A run config's `env` section for environment `name`: every field of its section with its
    default, `fields` overriding them (`config.env = env_section("qa_search", search_cost=0.1)`)."""
    section = registry.spec(name).config
    values = {f.name: getattr(section(), f.name) for f in dataclasses.fields(section)}
    unknown = sorted(set(fields) - set(values))
    if unknown:
        raise invalid(section, unknown[0], fields[unknown[0]], f"unknown field(s) {unknown}")
    return ml_collections.ConfigDict({"name": name, **values, **fields})


def default_config() -> ml_collections.ConfigDict:
    """Every field of a training run, with defaults; `configs/*.py` start from it. See the
    README's config reference."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    # An HF checkpoint directory; '' = the embedded default (built offline, cached);
    # "embedded:base" = its pretrained base (seetjax.defaults.base_model: SFT on generated tasks, cached).
    # `preset`: a public shape (seetjax.models.config.PRESETS) with random weights instead of
    # path's, which then names only the tokenizer (seetjax.rl.start_model; configs/scale_1_5b.py).
    c.model = ml_collections.ConfigDict(dict(path="", preset="", **LOAD_FIELDS))
    # Training tasks: the split's first `tasks_per_category` scenarios per category (0: all,
    # bfcl only), from `source`: "bfcl" (BFCL multi-turn) or "generated" (`generated` section).
    c.data = ml_collections.ConfigDict(dict(source="bfcl", split="train",
                                            categories=",".join(CATEGORIES),
                                            tasks_per_category=0, tasks_per_step=8,
                                            generated=generated_section()))
    # `name`: the environment (seetjax.envs.registry); the rest, its section's fields: here
    # BfclEnvConfig; tool_retrieval "bm25" or "dense" offers each turn its top-k tools among the
    # task's and `tool_retrieval_distractors` library ones (seetjax.envs.tool_retrieval).
    c.env = ml_collections.ConfigDict(dict(name=registry.DEFAULT, prompt_style="compact",
                                           compact_description_chars=80,
                                           max_steps_per_turn=20, tool_retrieval="off",
                                           tool_retrieval_k=10, tool_retrieval_distractors=100,
                                           tool_retrieval_encoder=""))
    c.limits = ml_collections.ConfigDict(dict(  # EpisodeLimits, in tokens
        max_reply_tokens=256, max_turn_tokens=1024, max_observation_tokens=1024,
        max_episode_tokens=8192))
    # mode "engine": rollouts through one serving engine for the run (docs/configs.md);
    # schedule "async": the next steps' rollouts play during the update, their tokens at most
    # max_staleness weight versions old, on the first sampler_devices devices (0: all; the rest
    # learn) (seetjax.rl.schedule.ScheduleConfig; docs/rollout.md#asynchronous-rl)
    c.rollout = ml_collections.ConfigDict(dict(group_size=8, num_threads=8, decode_chunk=16,
                                               mode="lockstep", schedule="sync", max_staleness=1,
                                               sampler_devices=0))
    # Branching rollouts (seetjax.rollout.branching.BranchConfig; docs/rollout.md#branching): off
    # with points="none"; training rollouts only, evaluations never branch.
    c.rollout.branch = ml_collections.ConfigDict(dataclasses.asdict(BranchConfig()))
    c.reward = reward_section()  # the reward trained on (seetjax.rewards.RewardConfig)
    c.sampling = ml_collections.ConfigDict(dict(temperature=1.0, top_k=0, top_p=1.0))
    # Multi-agent QA rollouts (seetjax.rollout.multi_agent.MultiAgentConfig): a coordinator
    # delegating sub-questions to search-agent workers; needs env.name=qa_search, reward.kind=env
    # and seet.enabled=False; separate_params: a parameter set (and optimizer state) per role.
    c.multi_agent = ml_collections.ConfigDict(dict(enabled=False, max_rounds=3,
                                                   sub_answer_weight=0.5, separate_params=False))
    # SFT warm-up (seetjax.sft): `run` is a whole SFT config (seetjax.sft.config, validated with
    # the plan); its model is this run's.
    c.sft = ml_collections.ConfigDict(dict(enabled=False, run=ml_collections.ConfigDict()))
    # seetjax.learner.learner_config fields.
    c.learner = ml_collections.ConfigDict(dict(algorithm="grpo", counterfactual_weight=0.1,
                                               pack_rows=True, share_prefixes=True,
                                               pairs_with_trajectories=True))
    c.learner.temperature = c.sampling.get_ref("temperature")
    c.learner.optimizer = ml_collections.ConfigDict(dict(learning_rate=1e-6, warmup_steps=0,
                                                         max_grad_norm=1.0))
    c.learner.lora = lora_section()
    c.seet = ml_collections.ConfigDict(dict(enabled=True, start_stage=1, single_stage=False,
                                            max_pairs=8))
    c.seet.anchors = ml_collections.ConfigDict(dict(capacity=4, max_age=0))  # 0: no age limit
    # Each stage: StageConfig fields, plus how long it lasts: `steps` training steps, or until
    # the rollout metric `until_metric` reaches `threshold` (after `min_steps`).
    for stage, steps in zip(default_stages(), (10, 10, 50, 0)):
        fields = {k: v for k, v in dataclasses.asdict(stage).items() if k != "stage"}
        fields.update(steps=steps, until_metric="", threshold=0.0, min_steps=0)
        c.seet[f"stage{stage.stage}"] = ml_collections.ConfigDict(fields)
    # The RL phase ends after `steps` steps, or after the step at which the policy tokens
    # sampled so far (every reply, retries included, over all processes) reach
    # `max_policy_tokens` (0: no budget): runs compute-matched by tokens, not by steps.
    # Periodic greedy evaluations: every `eval_every` steps (0: none) and, with
    # `eval_at_stage_ends`, after each SEET stage's last step; on the training tasks, and with
    # `eval_held_out` on the `eval.splits` tasks too (the held-out curve, kept per step).
    c.train = ml_collections.ConfigDict(dict(steps=100, eval_every=0, eval_at_stage_ends=False,
                                             eval_held_out=False, checkpoint_every=10,
                                             keep_checkpoints=2, max_policy_tokens=0))
    # decodings: how evaluation reads replies, each split reported under each (labelled):
    # lenient (ours) and official (bfcl_eval's own, python call format only).
    c.eval = ml_collections.ConfigDict(dict(splits="train,test", per_category=0,
                                            decodings="lenient,official"))
    # Alarms on silent rollout failures (seetjax.rl.alarms.AlarmConfig; docs/learner.md#alarms).
    c.alarms = ml_collections.ConfigDict(dict(max_mismatch_kl=0.01, fail_on_alarm=False))
    return c


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a run is made of, validated."""

    stages: tuple[StageConfig, ...]  # the stages the run goes through, in order
    transitions: tuple[Transition, ...]
    learner: LearnerConfig
    rollout: RolloutConfig
    sampling: SamplingParams
    eval_rollout: RolloutConfig
    eval_splits: Mapping[str, int]  # split -> tasks per category (0: all); "bfcl:test" names its source
    eval_decodings: tuple[str, ...]  # () for an environment that reads replies one way
    seet: bool  # False: plain RL, no SEET mechanics (one standard stage, no counterfactual)
    max_pairs: int  # counterfactual pairs per process per step (0: none)
    multi_agent: MultiAgentConfig | None = None  # None: single-agent rollouts
    alarms: AlarmConfig = AlarmConfig()
    schedule: ScheduleConfig = ScheduleConfig()

    @property
    def row_length(self) -> int:
        """The learner's fixed row width: an episode's tokens, or a counterfactual pair's prefix
        and step, always fit (seetjax.rollout.episode.EpisodeLimits), rounded up to 128."""
        limits = self.rollout.limits
        return -(-(limits.max_episode_tokens + limits.max_reply_tokens) // 128) * 128

    @property
    def param_roles(self) -> tuple[str, ...]:
        """The roles that train parameter sets of their own (`multi_agent.separate_params`);
        () when one policy plays every role."""
        return ROLES if self.multi_agent and self.multi_agent.separate_params else ()


def parse_eval_splits(splits: str, per_category: int) -> dict[str, int]:
    """`eval.splits` as split -> tasks per category: "train,test@32,bfcl:test@8" gives each split
    `per_category` tasks of each category unless it names its own count after "@" (0: all)."""
    counts = {}
    for entry in (e.strip() for e in splits.split(",")):
        if not entry:
            continue
        name, at, count = (part.strip() for part in entry.partition("@"))
        if at and not (count.isdigit() and name):
            raise invalid("config.eval", "splits", splits, f"{entry!r}: a split's own count is "
                          "'split@N', N >= 0 tasks per category")
        if name in counts:
            raise invalid("config.eval", "splits", splits, f"{name!r} appears twice")
        counts[name] = int(count) if at else per_category
    return counts


# The fields where an infinity means something: -inf, no floor; an infinite cap, none
# (tis_cap=inf: AReaL's decoupled objective).
INFINITE_FIELDS = ("reward.shaping.turn_penalty_floor", "learner.loss.tis_cap")


def build_plan(config: ml_collections.ConfigDict) -> Plan:
    if config.model.path is None:  # an ml_collections placeholder the config left unset
        raise invalid("config.model", "path", None, "this config needs an HF checkpoint directory")
    check_finite(config.to_dict(), infinite=INFINITE_FIELDS)
    checked_field("model", lambda: model_options(config.model))
    if config.model.get("preset") and config.sft.enabled:
        raise invalid("config.model", "preset", config.model.preset, "a preset's random weights "
                      "have no directory to warm up; set sft.enabled=False")
    _check_counts(config)
    env = env_of(config)
    spec = registry.spec_of(env)
    eval_splits = parse_eval_splits(config.eval.splits, config.eval.per_category)
    _check_periodic_evals(config.train, eval_splits)
    if spec.check_data is not None:
        spec.check_data(env, config.data.to_dict(), eval_splits)

    learner = checked_field("learner", lambda: learner_config(config.learner.to_dict()))
    limits = as_dataclass(EpisodeLimits, config.limits.to_dict(), "limits")
    schedule = schedule_of(config.rollout)
    schedule.check(learner.mini_batches)
    learner = with_stale_token_weights(learner, schedule)
    rollout = _rollout(config, env, limits, learner)
    if rollout.reward.kind == "env" and not spec.scores_episodes:
        raise invalid("config.reward", "kind", "env", f"environment {spec.name!r} does not score "
                      "its episodes itself; use 'progress', 'agent' or 'shaped'")
    # evaluations play in lock step whatever rollout.mode (greedy: the same episodes either way)
    eval_rollout = dataclasses.replace(rollout, group_size=1, branch=BranchConfig(),
                                       mode="lockstep")
    eval_decodings = _eval_decodings(config, env)
    sampling = as_dataclass(SamplingParams, config.sampling.to_dict(), "sampling")
    if sampling.temperature != learner.temperature:
        raise invalid("config.sampling", "temperature", sampling.temperature, "differs from "
                      f"config.learner.temperature={learner.temperature}: the learner must "
                      "score tokens under the distribution they were sampled from")

    seet = config.seet.enabled
    stages, transitions = (configured_stages(config.seet) if seet
                           else ((PLAIN_STAGE,), (Transition(None),)))
    if learner.term("policy_gradient") is not None:
        check_importance_ratios(config.learner.get("algorithm", "grpo"), sampling, stages)
    max_pairs = config.seet.max_pairs if seet and learner.term("counterfactual") else 0
    if seet and learner.term("counterfactual") and not config.seet.max_pairs:
        raise invalid("config.seet", "max_pairs", 0, "while config.learner.counterfactual_weight > "
                      "0: the counterfactual loss would never see a pair")
    chunks = learner.mini_batches * learner.micro_batches
    if max_pairs % chunks:
        raise invalid("config.seet", "max_pairs", max_pairs, "must be a multiple of "
                      f"learner.mini_batches x micro_batches = {chunks}")
    if learner.advantage in ("grpo", "rloo", "gigpo") and rollout.group_size < 2:
        raise invalid("config.rollout", "group_size", rollout.group_size, f"{learner.advantage} "
                      "advantages need at least 2 samples per task")
    multi_agent = _multi_agent(config, spec.name, rollout)  # before the SFT data that reads it
    if schedule.schedule == "async" and multi_agent is not None:
        raise invalid("config.rollout", "schedule", "async", "not with multi_agent.enabled: "
                      "teams play in lock step, one step at a time")
    if schedule.sampler_devices and multi_agent is not None:
        raise invalid("config.rollout", "sampler_devices", schedule.sampler_devices,
                      "a sampler mesh of its own serves single-agent rollouts only")
    if config.sft.enabled:
        from seetjax.sft.config import validate as validate_sft  # the SFT data side: only when used
        checked_field("sft.run", lambda: validate_sft(config.sft.run))
    alarms = as_dataclass(AlarmConfig, config.alarms.to_dict() if "alarms" in config else {},
                          "alarms")  # absent (configs saved before the section): the defaults
    return Plan(stages, transitions, learner, rollout, sampling, eval_rollout, eval_splits,
                eval_decodings, seet, max_pairs, multi_agent, alarms, schedule)


def _rollout(config: ml_collections.ConfigDict, env: Any, limits: EpisodeLimits,
             learner: LearnerConfig) -> RolloutConfig:
    """`config.rollout` with its `branch` section (absent in configs saved before it: off).
    GiGPO's step groups need an environment that says what its state is (`KeyedState`): on any
    other every step key is -1, and GiGPO would silently be GRPO."""
    values = {k: v for k, v in config.rollout.to_dict().items() if k not in SCHEDULE_FIELDS}
    branch = as_dataclass(BranchConfig, values.pop("branch", {}), "rollout.branch")
    rollout = as_dataclass(RolloutConfig, values, "rollout", env=env, limits=limits,
                           reward=reward_of(config), branch=branch)
    horizon = getattr(learner.advantage_config, "horizon", None)
    if branch.points != "none" and branch.until == "turn" and horizon != "turn":
        raise invalid("config.rollout.branch", "until", "turn", "ends a branch's return with its "
                      "fork turn, so its siblings' returns must end there too: needs "
                      "learner.algorithm 'grpo' or 'gigpo' with config.learner.advantage.horizon="
                      f"'turn' (here {learner.advantage!r}, horizon {horizon!r})")
    if horizon == "turn" and not rollout.reward.stepwise:
        raise invalid("config.reward", "kind", rollout.reward.kind, "learner.advantage.horizon="
                      "'turn' ends returns with their turn and needs a reward per turn "
                      "('shaped'); this kind scores whole episodes")
    made = registry.spec_of(env).make
    made = made if isinstance(made, type) else get_type_hints(made).get("return")
    if learner.advantage == "gigpo" and not (isinstance(made, type)
                                             and issubclass(made, KeyedState)):
        raise invalid("config.learner", "advantage", "gigpo", f"environment "
                      f"{registry.spec_of(env).name!r} ({getattr(made, '__name__', made)}) has "
                      "no state_view: no step would have a state key, and GiGPO would silently be "
                      "GRPO; use learner.algorithm='grpo'")
    return rollout


def _multi_agent(config: ml_collections.ConfigDict, env_name: str,
                 rollout: RolloutConfig) -> MultiAgentConfig | None:
    """`config.multi_agent` validated (None when disabled or absent): teams play the QA
    environment, are rewarded with their credits (reward.kind "env") and without SEET."""
    if "multi_agent" not in config:
        return None
    team = as_dataclass(MultiAgentConfig, config.multi_agent.to_dict(), "multi_agent")
    if not team.enabled:
        if team.separate_params:
            raise invalid("config.multi_agent", "separate_params", True,
                          "with multi_agent.enabled=False: only a multi-agent run has roles to "
                             "give parameter sets of their own")
        return None
    if rollout.mode == "engine":
        raise invalid("config.rollout", "mode", "engine", "with config.multi_agent.enabled=True: "
                      "teams play in lock step; use rollout.mode='lockstep'")
    for wrong, why in ((env_name != "qa_search", f"env.name={env_name!r}: teams play the "
                        "qa_search environment"),
                       (rollout.reward.kind != "env", f"reward.kind={rollout.reward.kind!r}: "
                        "teams are trained on their credits, reward.kind='env'"),
                       (config.seet.enabled, "seet.enabled=True: SEET's mechanics do not apply "
                        "to teams; set seet.enabled=False"),
                       (rollout.branch.points != "none", f"rollout.branch.points="
                        f"{rollout.branch.points!r}: teams do not branch")):
        if wrong:
            raise invalid("config.multi_agent", "enabled", True, f"with config.{why}")
    return team


def _eval_decodings(config: ml_collections.ConfigDict, env: Any) -> tuple[str, ...]:
    """`eval.decodings`, for an environment whose section has a `decoding` field (BFCL's): each
    one valid with the section; other environments read replies one way and take none ('')."""
    decodings = tuple(d.strip() for d in config.eval.decodings.split(",") if d.strip())
    if "decoding" not in {f.name for f in dataclasses.fields(env)}:
        if decodings:
            raise invalid("config.eval", "decodings", config.eval.decodings, "environment "
                          f"{registry.spec_of(env).name!r} reads replies one way; set ''")
        return ()
    if not decodings or len(set(decodings)) < len(decodings):
        raise invalid("config.eval", "decodings", config.eval.decodings, "a comma-separated "
                      f"list of distinct decodings, from {DECODINGS}")
    for d in decodings:
        checked_field("eval.decodings", lambda d=d: dataclasses.replace(env, decoding=d))
    return decodings


# Counts and periods: (field, smallest value, what the smallest means when it is 0).
_COUNTS = (("data.tasks_per_step", 1, ""), ("train.steps", 1, ""),
           ("data.tasks_per_category", 0, " (0: all)"), ("eval.per_category", 0, " (0: all)"),
           ("train.checkpoint_every", 1, ""), ("train.keep_checkpoints", 1, ""),
           ("train.eval_every", 0, " (0: never)"), ("seet.max_pairs", 0, ""),
           ("seet.anchors.capacity", 1, ""), ("seet.anchors.max_age", 0, " (0: no limit)"),
           ("train.max_policy_tokens", 0, " (0: no budget)"))


def _check_periodic_evals(train: ml_collections.ConfigDict, eval_splits: dict) -> None:
    """The periodic evaluations' switches are booleans, and `eval_held_out` has evaluations
    to extend and splits to score (otherwise it would silently do nothing)."""
    for name in ("eval_at_stage_ends", "eval_held_out"):
        if not isinstance(train[name], bool):
            raise invalid("config.train", name, train[name], "must be True or False")
    if train.eval_held_out and not (train.eval_every or train.eval_at_stage_ends):
        raise invalid("config.train", "eval_held_out", True, "no periodic evaluation to extend; "
                      "set config.train.eval_every or config.train.eval_at_stage_ends")
    if train.eval_held_out and not eval_splits:
        raise invalid("config.train", "eval_held_out", True,
                      "config.eval.splits names no split to score")


def _check_counts(config: ml_collections.ConfigDict) -> None:
    """Every count and period an integer in range, before anything runs (a negative count would
    slice the task list, a zero period divide by zero after the first step)."""
    for path, least, meaning in _COUNTS:
        value = config
        for key in path.split("."):
            value = value[key]
        require_int("config", path, value, least, meaning)
