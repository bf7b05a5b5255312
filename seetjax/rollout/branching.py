"""Forking an episode at a tool-call boundary: K copies that go on from one state (issue 44).

A boundary is where the environment has answered a reply (or the episode has just started) and the
next reply is not sampled yet. A fork is then exact and cheap: each copy's environment is a fresh
instance of the task restored from the parent's snapshot (`Rewindable`; never shared mutable
state), its conversation, logs and trace are copies, and its sampler row is a copy of the parent's
KV-cache row (`SamplerPolicy.fork`, no re-prefill). Siblings then sample their own next replies
from the same state, which is what makes a state-conditioned baseline exact: the step keys of
their first replies (`seetjax.envs.state_keys`) are equal, so GiGPO's step group
(`seetjax.losses.gigpo.gigpo_advantages`) compares actions from one state.

Where to fork. "every_call" forks as the episode is played. "divergence" and "entropy" choose
their points once the original episode is over (`late_points`), from `Boundary` copies kept on
the way: a failed turn's first point of logical divergence (`seetjax.seet.fpld` against the turn's
ground truth), or the call openings whose first token was least likely (the sampled token's
surprisal, -log p, an unbiased one-sample estimate of the entropy there). Their branches are
played afterwards, each row prefilled from its context (the K copies of one point share one
prefill, `SamplerPolicy.start`). A branch goes on to the episode's end, or with
`until="turn"` stops at the end of its fork turn and is scored on that turn alone (`TurnBranch`).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seetjax.envs.base import EpisodeTrace, ToolEnv
from seetjax.envs.capabilities import Rewindable
from seetjax.errors import invalid, require, require_int
from seetjax.rewards import RewardConfig, assigned_rewards, progress_reward
from seetjax.rollout.episode import Episode
from seetjax.sampling import Completion
from seetjax.seet.records import CounterfactualRecord, divergent_step

# Shared by a parent and its copies: read-only for an episode's whole life.
_SHARED = ("task", "tokenizer", "stage", "limits")


def at_boundary(episode: Episode) -> bool:
    """Whether `episode` may fork now: not over, and its conversation ends with the prompt or with
    an observation (the environment answered; the next reply is not sampled yet)."""
    return not episode.done and episode.conversation.segments[-1].kind in ("prompt", "observation")


@dataclasses.dataclass(frozen=True)
class Boundary:
    """An episode at a tool-call boundary, to fork from later: its attributes but the environment
    and the random generator (`state`), and its environment's `snapshot`."""

    state: dict[str, Any]
    snapshot: Any

    @classmethod
    def of(cls, episode: Episode, keep: bool = True) -> Boundary:
        """`episode`'s boundary now; `keep`: its logs deep-copied, so it outlives the episode's
        next replies (otherwise the live logs, to fork from at once)."""
        require(at_boundary(episode), Episode, "done/last segment",
                (episode.done, episode.conversation.segments[-1].kind),
                "a fork needs an episode that is not over, at a tool-call boundary")
        require(isinstance(episode.env, Rewindable), Episode, "env", type(episode.env).__name__,
                "forking needs an environment with snapshot()/restore()")
        state = {k: v for k, v in vars(episode).items() if k not in ("env", "rng")}
        return cls(_copied(state) if keep else state, episode.env.snapshot())

    def fork(self, env: ToolEnv, seed: int, kind: type[Episode] = Episode) -> Episode:
        """A `kind` episode that goes on from here independently: `env` (a fresh environment of
        the parent's kind) reset to the task and restored from the snapshot; every log a deep
        copy; its fast-loop draws from `seed`."""
        require(isinstance(env, Rewindable), Episode, "env", type(env).__name__,
                "forking needs an environment with snapshot()/restore()")
        env.reset(self.state["task"])
        env.restore(self.snapshot)
        child = object.__new__(kind)
        vars(child).update(_copied(self.state))
        child.env, child.rng = env, random.Random(seed)
        return child


def _copied(state: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of an episode's attributes, sharing what never changes (`_SHARED`)."""
    return copy.deepcopy(state, {id(state[name]): state[name] for name in _SHARED})


def fork_episode(parent: Episode, env: ToolEnv, seed: int) -> Episode:
    """A copy of `parent` at a boundary that goes on independently (`Boundary.fork`)."""
    return Boundary.of(parent, keep=False).fork(env, seed)


def fork_episodes(parent: Episode | Boundary, copies: int, new_env: Callable[[], ToolEnv],
                  seed: int, kind: type[Episode] = Episode) -> list[Episode]:
    """`copies` independent forks (of `kind`) of `parent`, an episode now at a boundary or a
    kept `Boundary`, seeded `seed`, `seed + 1`, ..."""
    require(copies >= 1, "fork_episodes", "copies", copies, "must be >= 1")
    at = parent if isinstance(parent, Boundary) else Boundary.of(parent, keep=False)
    return [at.fork(new_env(), seed + i, kind) for i in range(copies)]


POINTS = ("none", "every_call", "divergence", "entropy")  # where an original episode forks
LATE_POINTS = ("divergence", "entropy")  # chosen once the original episode is over
HORIZONS = ("turn", "episode")  # how far a branch is played


@dataclasses.dataclass(frozen=True)
class BranchConfig:
    """Branching rollouts (`RolloutConfig.branch`). points: "none" (plain rollouts);
    "every_call": after every reply of an original episode whose calls ran, `k` copies fork and
    sample their own next reply from that state; "divergence": at the first point of logical
    divergence of each failed turn (the reply where its executed calls first depart from the
    turn's ground truth, `seetjax.seet.fpld`), `k` copies resample that reply from the state it
    was sampled in; "entropy": the same at the `max_forks` call openings of the episode with the
    highest entropy estimate (`late_points`). Branches do not fork again. until: "episode" plays
    a branch to the episode's end; "turn" stops it at the end of its fork turn and scores it on
    that turn alone (`TurnBranch`). budget: forks stop once the branches' own policy tokens
    reach it (0: no limit), so a branching run can be compute-matched against plain rollouts by
    policy tokens ("divergence"/"entropy" check it before each round of forks, one point per
    episode a round); max_forks: the fork points of one original episode (later ones fork
    nothing), which bounds a step's rows (`rows_per_episode`) so the learner's batch has one
    shape."""

    points: str = "none"
    k: int = 1
    budget: int = 0
    max_forks: int = 1
    until: str = "episode"

    def __post_init__(self):
        require(self.points in POINTS, self, "points", self.points, f"must be one of {POINTS}")
        require_int(self, "k", self.k, 1)
        require_int(self, "budget", self.budget, 0, " (0: no limit)")
        require_int(self, "max_forks", self.max_forks, 1)
        require(self.until in HORIZONS, self, "until", self.until, f"must be one of {HORIZONS}")

    @property
    def rows_per_episode(self) -> int:
        """The most rows one original episode brings to a step's batch: itself and its branches."""
        return 1 if self.points == "none" else 1 + self.k * self.max_forks

    @property
    def kind(self) -> type[Episode]:
        """The class of a branch row: `TurnBranch` with until="turn"."""
        return TurnBranch if self.until == "turn" else Episode


class TurnBranch(Episode):
    """A branch played to the end of its fork turn only (`BranchConfig.until="turn"`): once that
    turn is judged the branch is over (the turns after it are not its), and its rewards and
    progress are those of a one-turn episode made of that turn (its steps, verdict and ground
    truth), placed on its replies as an episode's are (`Episode.rewards`). Its row ends with the
    turn's last reply: the next turn's request, never answered, is not appended."""

    def reply(self, completion: Completion) -> list[int] | None:
        ids = super().reply(completion)
        if not self._fork_turn_judged():
            return ids
        del self.turns[self.inherited_turns + 1:]
        self.done = True
        return None

    def _fork_turn_judged(self) -> bool:
        return self.turns[self.inherited_turns].passed is not None

    def _append(self, observations: Sequence[Mapping[str, Any]],
                max_tokens: int) -> list[int] | None:
        if not self._fork_turn_judged():
            return super()._append(observations, max_tokens)
        # Over with its turn: the next request, never answered, is not appended, but where it
        # would not fit the branch is truncated as the episode would be (as its parent is).
        return [] if self.conversation.fits(observations, max_tokens) else None

    def fork_turn_trace(self) -> tuple[EpisodeTrace, list[int]]:
        """The fork turn as a one-turn episode (turn 0), and the index in `trace().steps` of
        each of its steps."""
        full, turn = self.trace(), self.turns[self.inherited_turns].turn
        kept = [i for i, s in enumerate(full.steps) if s.turn == turn]
        return EpisodeTrace(
            full.task_id, tuple(dataclasses.replace(full.steps[i], turn=0) for i in kept),
            tuple(dataclasses.replace(v, turn=0) for v in full.verdicts if v.turn == turn),
            (full.ground_truth[turn],), full.truncated), kept

    def rewards(self, config: RewardConfig) -> list[tuple[int, float]]:
        if config.kind == "env":
            raise invalid("BranchConfig", "until", "turn", "needs a reward computed from the "
                          "trace (reward kind 'env' scores whole episodes)")
        trace, kept = self.fork_turn_trace()
        ends = self.conversation.reply_ends()
        return [(ends[-1 if step is None else self.step_replies[kept[step]]], reward)
                for step, reward in assigned_rewards(trace, config)]

    def progress_reward(self) -> float:
        return progress_reward(self.fork_turn_trace()[0])


def branch_from(episode: Episode) -> Episode:
    """`episode`, a fresh fork, made a branch row: everything before the fork is in its training
    sequence as context only (masked, and without step keys), so the prefix is trained once, by
    the original row, and the branch's first reply joins the original's step group at the fork
    state; the turns judged before the fork and its counters so far (policy tokens, retries,
    hints, interceptions) are the original's (`Episode.inherited_turns`: the slow loop and the
    turn metrics skip those turns; `Episode.inherited`: `stats` counts the branch's own)."""
    episode.conversation.exclude(0, "mask")
    episode.reply_states.clear()
    episode.inherited = episode.counters()
    episode.inherited_turns = len(episode.turns) - 1  # judged: the original's records and anchors
    episode.branch = True
    return episode


def fork_point(config: BranchConfig, episode: Episode, spent: int) -> bool:
    """Whether `episode`, whose reply was just answered, forks now under `config` ("every_call"),
    the branches having spent `spent` policy tokens so far."""
    if (config.points != "every_call" or episode.branch or episode.forks >= config.max_forks
            or not at_boundary(episode)):
        return False
    if config.budget and spent >= config.budget:
        return False
    replies = episode.turns[-1].replies or (episode.turns[-2].replies if len(episode.turns) > 1
                                            else [])
    return bool(replies) and bool(replies[-1].ran)


def late_points(config: BranchConfig, episode: Episode) -> list[int]:
    """The conversation segments of the replies a finished original `episode` forks before under
    `config.points`, at most `max_forks`, in the order they fork: "divergence", per failed
    turn in order, the reply where the turn's executed calls first depart from its ground truth
    (`seetjax.seet.records.divergent_step`); "entropy", the replies that opened calls, by the
    surprisal of their first sampled token (-logprob, highest first; earlier on ties)."""
    if config.points == "divergence":
        truth, points = episode.trace().ground_truth, []
        for t in episode.turns:
            found = (divergent_step(t.replies, truth[t.turn])
                     if t.failed and t.checked and t.turn < len(truth) else None)
            if found is not None:
                points.append(t.replies[found[0]].segment)
    elif config.points == "entropy":
        segments = episode.conversation.segments
        openings = [r.segment for t in episode.turns for r in t.replies
                    if r.calls and segments[r.segment].logprobs]
        points = sorted(openings, key=lambda s: (segments[s].logprobs[0], s))
    else:
        raise invalid(config, "points", config.points, f"late fork points are {LATE_POINTS}")
    return points[:config.max_forks]


def late_forks(config: BranchConfig, episode: Episode, segment: int,
               kept: Mapping[int, Boundary], new_env: Callable[[], ToolEnv],
               seed: int) -> list[Episode]:
    """`config.k` branch rows of a finished original `episode` resampling its reply at
    `segment`, from the boundary kept before it (`kept`, by the segment of the reply that
    followed; before the first reply, segment 1, none is kept: the episode as it started),
    seeded `seed`, `seed + 1`, ..."""
    if segment == 1:
        return [branch_from(config.kind(episode.task, episode.sample, episode.tokenizer,
                                        new_env(), episode.stage, episode.progress,
                                        episode.limits, seed=seed + i))
                for i in range(config.k)]
    require(segment in kept, episode, "boundaries", sorted(kept),
            f"no boundary kept before the reply at segment {segment}")
    return [branch_from(e) for e in fork_episodes(kept[segment], config.k, new_env, seed,
                                                  config.kind)]


def context(episode: Episode) -> list[int]:
    """Every token of `episode`'s conversation so far, as its sampler row holds them (the prompt,
    for an episode not played yet)."""
    return [t for s in episode.conversation.segments for t in s.ids]


def fork_segment(branch: Episode) -> int | None:
    """The conversation segment of a branch's first own reply (None before it has one)."""
    return min(branch.reply_states, default=None)


def verified_replies(episodes: Sequence[Episode]
                     ) -> dict[tuple[str, int, tuple[int, ...]], tuple[int, ...]]:
    """On-policy corrections for SEET's records (issue 44 item 3): per (task id, sample, the
    training-sequence ids before the fork), the first own reply of a branch whose fork turn the
    checker passed, where that reply was no retried or intercepted attempt and all its calls
    ran (the first such branch of a fork point)."""
    out: dict[tuple[str, int, tuple[int, ...]], tuple[int, ...]] = {}
    for b in episodes:
        segment = fork_segment(b) if b.branch else None
        if segment is None or not b.turns[b.inherited_turns].passed:
            continue
        first = next((r for r in b.turns[b.inherited_turns].replies if r.segment == segment),
                     None)
        if first is not None and not first.attempt and first.ran == first.calls:
            key = (b.task_id, b.sample, tuple(b.conversation.training_ids(segment)))
            out.setdefault(key, first.ids)
    return out


def corrected(record: CounterfactualRecord, corrections: Mapping[
        tuple[str, int, tuple[int, ...]], tuple[int, ...]]) -> CounterfactualRecord:
    """`record` with the on-policy target `verified_replies` found for its failed step's context
    (anchor source "branch"), where there is one; else as it is."""
    ids = corrections.get((record.task_id, record.sample, record.prefix_ids))
    return record if ids is None else dataclasses.replace(record, anchor_ids=ids,
                                                          anchor_source="branch")
