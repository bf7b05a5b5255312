"""Forking an episode at a tool-call boundary: K copies that go on from one state (issue 44).

A boundary is where the environment has answered a reply (or the episode has just started) and the
next reply is not sampled yet. A fork is then exact and cheap: each copy's environment is a fresh
instance of the task restored from the parent's snapshot (`Rewindable`; never shared mutable
state), its conversation, logs and trace are copies, and its sampler row is a copy of the parent's
KV-cache row (`SamplerPolicy.fork`, no re-prefill). Siblings then sample their own next replies
from the same state, which is what makes a state-conditioned baseline exact: the step keys of
their first replies (`seetjax.envs.state_keys`) are equal, so GiGPO's step group
(`seetjax.losses.advantages.gigpo_advantages`) compares actions from one state.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable

from seetjax.envs.base import ToolEnv
from seetjax.envs.capabilities import Rewindable
from seetjax.errors import require
from seetjax.rollout.episode import Episode

# Shared by a parent and its copies: read-only for an episode's whole life.
_SHARED = ("task", "tokenizer", "stage", "limits")


def at_boundary(episode: Episode) -> bool:
    """Whether `episode` may fork now: not over, and its conversation ends with the prompt or with
    an observation (the environment answered; the next reply is not sampled yet)."""
    return not episode.done and episode.conversation.segments[-1].kind in ("prompt", "observation")


def fork_episode(parent: Episode, env: ToolEnv, seed: int) -> Episode:
    """A copy of `parent` at a boundary that goes on independently: `env` (a fresh environment of
    the parent's kind) is reset to the task and restored from the parent's snapshot; every log is
    a deep copy; the copy's fast-loop draws come from `seed`."""
    require(at_boundary(parent), Episode, "done/last segment",
            (parent.done, parent.conversation.segments[-1].kind),
            "a fork needs an episode that is not over, at a tool-call boundary")
    require(isinstance(parent.env, Rewindable) and isinstance(env, Rewindable), Episode, "env",
            type(parent.env).__name__, "forking needs an environment with snapshot()/restore()")
    env.reset(parent.task)
    env.restore(parent.env.snapshot())
    state = vars(parent)
    memo = {id(state[name]): state[name] for name in _SHARED}
    child = object.__new__(Episode)
    vars(child).update(copy.deepcopy(
        {k: v for k, v in state.items() if k not in ("env", "rng")}, memo))
    child.env, child.rng = env, random.Random(seed)
    return child


def fork_episodes(parent: Episode, copies: int, new_env: Callable[[], ToolEnv],
                  seed: int) -> list[Episode]:
    """`copies` independent forks of `parent` (`fork_episode`), seeded `seed`, `seed + 1`, ..."""
    require(copies >= 1, "fork_episodes", "copies", copies, "must be >= 1")
    return [fork_episode(parent, new_env(), seed + i) for i in range(copies)]


POINTS = ("none", "every_call")  # where an original episode forks


@dataclasses.dataclass(frozen=True)
class BranchConfig:
    """Branching rollouts (`RolloutConfig.branch`). points: "none" (plain rollouts) or
    "every_call": after every reply of an original episode whose calls ran, `k` copies fork and
    sample their own next reply from that state, each played to the episode's end (branches do
    not fork again); budget: forks stop once the branches' own policy tokens reach it (0: no
    limit), so a branching run can be compute-matched against plain rollouts by policy tokens;
    max_forks: the fork points of one original episode (later ones fork nothing), which bounds a
    step's rows (`rows_per_episode`) so the learner's batch has one shape."""

    points: str = "none"
    k: int = 1
    budget: int = 0
    max_forks: int = 1

    def __post_init__(self):
        require(self.points in POINTS, self, "points", self.points, f"must be one of {POINTS}")
        require(isinstance(self.k, int) and self.k >= 1, self, "k", self.k, "must be an int >= 1")
        require(isinstance(self.budget, int) and self.budget >= 0, self, "budget", self.budget,
                "must be an int >= 0 (0: no limit)")
        require(isinstance(self.max_forks, int) and self.max_forks >= 1, self, "max_forks",
                self.max_forks, "must be an int >= 1")

    @property
    def rows_per_episode(self) -> int:
        """The most rows one original episode brings to a step's batch: itself and its branches."""
        return 1 if self.points == "none" else 1 + self.k * self.max_forks


def branch_from(episode: Episode) -> Episode:
    """`episode`, a fresh fork, made a branch row: everything before the fork is in its training
    sequence as context only (masked, and without step keys), so the prefix is trained once, by
    the original row, and the branch's first reply joins the original's step group at the fork
    state; its policy tokens so far and the turns judged before the fork are the original's
    (`Episode.inherited_tokens`, `inherited_turns`: the slow loop skips those turns)."""
    episode.conversation.exclude(0, "mask")
    episode.reply_states.clear()
    episode.inherited_tokens = sum(t.tokens for t in episode.turns)
    episode.inherited_turns = len(episode.turns) - 1  # judged: the original's records and anchors
    episode.branch = True
    return episode


def fork_point(config: BranchConfig, episode: Episode, spent: int) -> bool:
    """Whether `episode`, whose reply was just answered, forks now under `config`, the branches
    having spent `spent` policy tokens so far."""
    if (config.points == "none" or episode.branch or episode.forks >= config.max_forks
            or not at_boundary(episode)):
        return False
    if config.budget and spent >= config.budget:
        return False
    replies = episode.turns[-1].replies or (episode.turns[-2].replies if len(episode.turns) > 1
                                            else [])
    return bool(replies) and bool(replies[-1].ran)
