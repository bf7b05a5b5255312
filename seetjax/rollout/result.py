"""What a rollout returns: the episodes scored under the run's reward with the slow loop's records
(`RolloutResult`), and where its wall time went (`PlayTimes`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from seetjax.envs.capabilities import ScoresEpisodes
from seetjax.rewards import RewardConfig, gaming_metrics
from seetjax.rollout.episode import Episode
from seetjax.sampling import Completion
from seetjax.seet.records import CounterfactualRecord


@dataclasses.dataclass
class PlayTimes:
    """Where a rollout's wall time went, and how busy the lock-step batch was.

    sampling_s: policy calls (prefill of the new observation tokens, decoding, host transfers of
    the sampled ids); environment_s: reply handling in the episode threads (parsing, tool
    execution, hints, checking, tokenising observations); slow_loop_s: anchors and
    counterfactual records. Each policy call decodes every row for as many steps as its
    longest reply: `row_steps` counts those row-steps, `reply_tokens` the tokens replies kept,
    so 1 - reply_tokens / row_steps is the share of decoding spent on rows already done, and
    reply_tokens / sampling_s the rollout's tokens per second. In mode "engine"
    (`engine_play.play_on_engine`) sampling and the environment overlap: sampling_s is the
    engine's time prefilling and decoding, environment_s the wall time during which at least one
    reply was being handled (their sum may exceed the wall time), a policy call is one reply's
    request, and row_steps counts every row the engine held at each step (free and padding rows,
    and other clients' rows, included).
    """

    sampling_s: float = 0.0
    environment_s: float = 0.0
    slow_loop_s: float = 0.0
    policy_calls: int = 0
    reply_tokens: int = 0
    row_steps: int = 0

    def add_call(self, completions: Sequence[Completion]) -> None:
        self.policy_calls += 1
        lengths = [len(c.tokens) for c in completions]
        self.reply_tokens += sum(lengths)
        self.row_steps += len(lengths) * max(lengths, default=0)

    def add(self, other: PlayTimes) -> None:
        """Adds `other`'s times and counts (rollouts made of several plays)."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def metrics(self) -> dict[str, float]:
        return {"sampling_s": self.sampling_s, "environment_s": self.environment_s,
                "slow_loop_s": self.slow_loop_s, "policy_calls": float(self.policy_calls),
                "idle_share": 1.0 - self.reply_tokens / max(self.row_steps, 1),
                "tokens_per_s": self.reply_tokens / self.sampling_s if self.sampling_s else 0.0}


@dataclasses.dataclass
class RolloutResult:
    """The episodes to train on, scored under `reward`, with the slow loop's records and anchor
    counts. Episodes the policy never acted in are left out and counted: `over_token_cap`, whose
    prompt left no room for a reply (`Episode.over_token_cap`), and `unstarted`, whose
    environment failed to start (`Episode.unstarted`). They train nothing, so their rewards must
    not enter any group's statistics; a batch keeps a padding row for each (`left_out`: its
    shapes do not change)."""

    episodes: list[Episode]
    records: list[CounterfactualRecord]
    anchors_used: dict[str, int]
    reward: RewardConfig = RewardConfig()
    times: PlayTimes = dataclasses.field(default_factory=PlayTimes)
    over_token_cap: int = 0
    unstarted: int = 0

    @classmethod
    def of(cls, episodes: Sequence[Episode], *args: Any, **fields: Any) -> RolloutResult:
        """The result of `episodes` (the other fields as the constructor's), those the policy
        never acted in left out and counted in `over_token_cap` and `unstarted`."""
        unstarted = sum(e.unstarted for e in episodes)
        over = sum(e.over_token_cap and not e.unstarted for e in episodes)
        kept = [e for e in episodes if not (e.over_token_cap or e.unstarted)]
        return cls(kept, *args, over_token_cap=over, unstarted=unstarted, **fields)

    @property
    def left_out(self) -> int:
        """Episodes started and left out of training (a padding row each in a batch)."""
        return self.over_token_cap + self.unstarted

    @functools.cached_property
    def scored(self) -> list[list[tuple[int, float]]]:
        """Per episode, its rewards under `reward` with their training-sequence positions
        (`Episode.rewards`)."""
        return [e.rewards(self.reward) for e in self.episodes]

    def rewards(self) -> np.ndarray:
        """[episodes] f32: each episode's return under `reward` (the sum of its rewards)."""
        return np.asarray([sum(r for _, r in rewards) for rewards in self.scored], np.float32)

    def progress(self) -> np.ndarray:
        """[episodes] f32: EnvTuning's progress of each episode, whatever reward is trained."""
        return np.asarray([e.progress_reward() for e in self.episodes], np.float32)

    def group_ids(self) -> np.ndarray:
        index: dict[str, int] = {}
        return np.asarray([index.setdefault(e.task_id, len(index)) for e in self.episodes],
                          np.int32)

    def stats(self) -> dict[str, float]:
        """Means over episodes: reward (the return under the run's reward kind) and progress
        (EnvTuning's, comparable across kinds); turn accuracy over all turns and over the turns
        that expect calls (BFCL's checked turns); silent turns, the share of checked turns failed
        without a call attempted (`TurnLog.silent`); unproductive turns, the share of checked turns
        failed after calls that made no progress toward their ground truth, and repeated calls,
        the share of calls repeating one made earlier in their turn (the reward-hack detectors,
        `seetjax.rewards.gaming_metrics`); format validity, the share
        of replies that ended with their stop token and parsed; SEET's counters; and where the
        environment scores its episodes (`ScoresEpisodes`), the mean of each part of its reward,
        `env_<part>`. One figure is a total, not a mean: `policy_tokens`, every token the policy
        sampled for these episodes, retries included (what a compute-matched comparison holds
        equal), branch rows' own included, also alone as `branch_policy_tokens`; and counts,
        `branch_rows`, `episodes_over_token_cap` and `episodes_unstarted` (left out)."""
        turns = [t for e in self.episodes for t in e.turns[e.inherited_turns:]]  # branches': own
        checked = [t for t in turns if t.checked]
        replies = [r for t in turns for r in t.replies]
        per_episode = [e.stats() for e in self.episodes]
        n = max(len(self.episodes), 1)
        out = {"reward": float(self.rewards().mean()) if self.episodes else 0.0,
               "progress": float(self.progress().mean()) if self.episodes else 0.0,
               "turn_accuracy": sum(bool(t.passed) for t in turns) / max(len(turns), 1),
               "checked_turn_accuracy": sum(bool(t.passed) for t in checked) / max(len(checked), 1),
               # what per-call penalties alone reward: giving up without calling
               "silent_turns": sum(t.silent for t in checked) / max(len(checked), 1),
               "format_validity": sum(r.well_formed for r in replies) / max(len(replies), 1),
               "replies": len(replies) / n,  # environment steps per episode
               "records": float(len(self.records)),
               **gaming_metrics([e.trace() for e in self.episodes])}
        for key in ("retries", "hints", "interceptions", "truncated", "errors"):
            out[key] = sum(s[key] for s in per_episode) / n
        out["policy_tokens"] = float(sum(s["policy_tokens"] for s in per_episode))
        out["branch_rows"] = float(sum(e.branch for e in self.episodes))
        out["branch_policy_tokens"] = float(sum(s["policy_tokens"] for e, s in
                                                zip(self.episodes, per_episode) if e.branch))
        out["episodes_over_token_cap"] = float(self.over_token_cap)
        out["episodes_unstarted"] = float(self.unstarted)
        out.update({f"anchors_{k}": float(v) for k, v in self.anchors_used.items()})
        if self.episodes and all(isinstance(e.env, ScoresEpisodes) for e in self.episodes):
            parts = [e.env_reward() for e in self.episodes]
            out.update({f"env_{k}": float(np.mean([p[k] for p in parts])) for k in parts[0]})
        return out
