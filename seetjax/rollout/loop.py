"""Batched multi-turn rollouts: B tasks x G samples, SEET's fast loop inside, slow loop after.

Every live episode is advanced by one policy call per step (one sampler call for the whole batch);
each reply is handled by its episode in a thread pool (tool execution, hints, interception);
finished episodes drop out. Afterwards, verified-correct turns become anchors (peers within each
task's group, the pool for later steps) and failed turns with an anchor become counterfactual
records. Each episode gets a fresh environment of the kind the config's `env` section is (any
`ToolEnv` in `seetjax.envs.registry`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from seetjax.envs.registry import make_env, spec_of
from seetjax.errors import invalid, require
from seetjax.models.tokenizer import Tokenizer
from seetjax.rewards import RewardConfig
from seetjax.rollout.branching import (
    LATE_POINTS,
    Boundary,
    BranchConfig,
    branch_from,
    context,
    corrected,
    fork_episodes,
    fork_point,
    late_forks,
    late_points,
    verified_replies,
)
from seetjax.rollout.engine_play import ReplyEngine, play_on_engine
from seetjax.rollout.episode import Episode, EpisodeLimits
from seetjax.rollout.policy import Policy
from seetjax.rollout.result import PlayTimes, RolloutResult
from seetjax.sampling import Completion
from seetjax.seet.anchors import Anchor, AnchorPool, AnchorStep, choose_anchor
from seetjax.seet.config import StageConfig
from seetjax.seet.records import CounterfactualRecord, records_for_turn
from seetjax.tools.calls import ToolCall

MODES = ("lockstep", "engine")  # how episodes reach the model (`RolloutConfig.mode`)


@dataclasses.dataclass
class Played:
    """A rollout's episodes played to their end, before the slow loop: the episodes (branches
    included), where the time went, and the SEET stage they were played in."""

    episodes: list[Episode]
    times: PlayTimes
    stage: StageConfig


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """decode_chunk: 0 samples each reply in one policy call, every live row in lock step until
    the longest reply ends; N > 0 asks for at most N tokens per call, so a row whose reply ended
    has its tool observation appended and starts its next reply while the others go on (rows
    wait at most N steps for the batch instead of the longest reply). Replies are drawn from the
    same distribution either way (greedy ones are the same tokens up to float rounding between
    batch shapes); only the batching and the random draws differ.

    mode: "lockstep" (the default, and the engine's baseline) plays with a `Policy` as above;
    "engine" plays each episode through a continuous-batching engine (`ReplyEngine`:
    `seetjax.serving.rollout_policy.EnginePolicy`), no lock step (`engine_play.py`); the engine's
    own chunk size applies there, not decode_chunk, and branching is not supported."""

    group_size: int = 4
    env: Any = dataclasses.field(kw_only=True)  # a registered environment's section, always named
    limits: EpisodeLimits = EpisodeLimits()
    num_threads: int = 8
    reward: RewardConfig = RewardConfig()  # the reward the episodes are scored with
    decode_chunk: int = 0
    branch: BranchConfig = BranchConfig()  # forks at tool-call boundaries (branching.py)
    mode: str = "lockstep"

    def __post_init__(self):
        spec_of(self.env)  # fails unless a registered environment's section
        require(self.mode in MODES, self, "mode", self.mode, f"must be one of {MODES}")
        require(self.mode == "lockstep" or self.branch.points == "none", self, "mode", self.mode,
                f"branching (branch.points={self.branch.points!r}) forks rows of a lock-step "
                "policy: use mode 'lockstep' or branch.points 'none'")
        if self.decode_chunk < 0:
            raise invalid(self, "decode_chunk", self.decode_chunk, "must be >= 0 "
                             "(0: each reply in one call)")


class Rollout:
    """Runs SEET episodes for a batch of tasks with a policy and keeps the anchor pool."""

    def __init__(self, tokenizer: Tokenizer, config: RolloutConfig,
                 pool: AnchorPool | None = None):
        self.tokenizer, self.config = tokenizer, config
        self.pool = pool if pool is not None else AnchorPool()
        self._threads = concurrent.futures.ThreadPoolExecutor(config.num_threads)
        # Per original episode, its boundaries by the segment of the reply that followed each:
        # what "divergence" and "entropy" forks resume from (`_branch_late`).
        self._boundaries: weakref.WeakKeyDictionary[Episode, dict[int, Boundary]] = (
            weakref.WeakKeyDictionary())

    def episodes(self, tasks: Sequence[Any], stage: StageConfig, progress: float,
                 seed: int) -> list[Episode]:
        g = self.config.group_size
        return [Episode(task, s, self.tokenizer, make_env(self.config.env), stage, progress,
                        self.config.limits, seed=seed * 1_000_003 + i * g + s)
                for i, task in enumerate(tasks) for s in range(g)]

    def play(self, episodes: Sequence[Episode], policy: Policy | ReplyEngine) -> PlayTimes:
        """Advances every episode to its end, one policy call per step for all live ones;
        returns where the time went. With `config.branch` on, `episodes` is a list that the
        branches forked on the way are appended to (`_branch`). With `config.mode` "engine",
        `policy` is a `ReplyEngine` and each episode advances on its own (`play_on_engine`)."""
        engine = isinstance(policy, ReplyEngine)
        require(engine == (self.config.mode == "engine"), self.config, "mode", self.config.mode,
                f"'engine' plays with a ReplyEngine (EnginePolicy), 'lockstep' with a Policy; "
                f"got a {type(policy).__name__}")
        if engine:
            return play_on_engine(episodes, policy, self._threads)
        times = PlayTimes()
        clock = time.perf_counter()
        policy.start([context(e) for e in episodes])  # the prompt, but for late branches
        live = [i for i, e in enumerate(episodes) if not e.done]  # over_token_cap: never played
        chunks: list[list[int]] = [[] for _ in episodes]
        partial: dict[int, Completion] = {}  # replies still being sampled (decode_chunk > 0)
        step = self.config.decode_chunk
        while live:
            budgets = [episodes[i].reply_budget() - len(partial[i].tokens) if i in partial
                       else episodes[i].reply_budget() for i in live]
            asked = [min(b, step) if step else b for b in budgets]
            completions = policy.generate(live, [chunks[i] for i in live], asked)
            now = time.perf_counter()
            times.sampling_s += now - clock
            times.add_call(completions)
            ended = []
            for i, c, budget, n in zip(live, completions, budgets, asked):
                if i in partial:
                    done = partial.pop(i)
                    c = Completion(done.tokens + c.tokens, done.logprobs + c.logprobs,
                                   c.finish_reason, done.versions + c.versions)
                chunks[i] = []
                if c.finish_reason == "length" and n < budget:
                    partial[i] = c  # cut by the chunk, not by the reply's limit: goes on
                else:
                    ended.append((i, c))
            answers = list(self._threads.map(lambda ic: episodes[ic[0]].reply(ic[1]), ended))
            clock = time.perf_counter()
            times.environment_s += clock - now
            for (i, _), nxt in zip(ended, answers):
                if nxt is not None:
                    chunks[i] = nxt
            over = {i for (i, _), nxt in zip(ended, answers) if nxt is None}
            live = [i for i in live if i not in over]
            live += self._branch(episodes, policy, [i for i, _ in ended if i not in over], chunks)
        return times

    def _branch(self, episodes: Sequence[Episode], policy: Policy, answered: Sequence[int],
                chunks: list[list[int]]) -> list[int]:
        """Forks `config.branch.k` branch rows (`branching.branch_from`) of each answered
        episode at a fork point; appends them to `episodes` and their pending ids to `chunks`;
        returns their indices."""
        config, new = self.config.branch, []
        if config.points in LATE_POINTS:  # kept to fork from once the episode is over
            for i in answered:
                if not episodes[i].branch and not episodes[i].done:
                    self._boundaries.setdefault(episodes[i], {})[
                        len(episodes[i].conversation.segments)] = Boundary.of(episodes[i])
        if config.points != "every_call":
            return new
        if not (isinstance(episodes, list) and hasattr(policy, "fork")):
            raise invalid(self.config, "branch", config, "needs a list of episodes and a "
                          f"policy that forks rows ({type(policy).__name__} has no fork)")
        for i in answered:
            spent = sum(e.stats()["policy_tokens"] for e in episodes if e.branch)
            if not fork_point(config, episodes[i], spent):
                continue
            children = [branch_from(e) for e in fork_episodes(
                episodes[i], config.k, lambda: make_env(self.config.env),
                seed=episodes[i].rng.randrange(1 << 30), kind=config.kind)]
            episodes[i].forks += 1
            rows = list(range(len(episodes), len(episodes) + len(children)))
            policy.fork(i, rows)
            episodes.extend(children)
            chunks.extend(list(chunks[i]) for _ in children)
            new += rows
        return new

    def _branch_late(self, episodes: list[Episode], policy: Policy) -> PlayTimes:
        """"divergence" and "entropy" forks (`branching.late_points`) of the finished original
        `episodes`: in rounds, round r forking each episode's r-th point into `config.k` branch
        rows from its kept boundary (the first reply's: a fresh episode), while the branches'
        policy tokens are under the budget; each round's branches are played together and
        appended to `episodes`. Returns where the time went."""
        config, times = self.config.branch, PlayTimes()
        if config.points not in LATE_POINTS:
            return times
        originals = [e for e in episodes if not (e.branch or e.over_token_cap or e.unstarted)]
        points = {id(e): late_points(config, e) for e in originals}
        for r in range(config.max_forks):
            spent = sum(e.stats()["policy_tokens"] for e in episodes if e.branch)
            if config.budget and spent >= config.budget:
                break
            branches = []
            for e in originals:
                if r < len(points[id(e)]):
                    branches += late_forks(config, e, points[id(e)][r],
                                           self._boundaries.get(e, {}),
                                           lambda: make_env(self.config.env),
                                           e.rng.randrange(1 << 30))
                    e.forks += 1
            if not branches:
                break
            times.add(self.play(branches, policy))
            episodes.extend(branches)
        self._boundaries.clear()
        return times

    def slow_loop(self, episodes: Sequence[Episode], stage: StageConfig, step: int
                  ) -> RolloutResult:
        """Anchors from the verified-correct turns, records for failed turns, pool update."""
        sources = [s for s, on in (("peer", stage.peer_anchors),
                                   ("historical", stage.historical_anchors),
                                   ("induced", stage.induced_anchors)) if on]
        peers: dict[tuple[str, int, str], Anchor] = {}
        anchors = [self._anchors(e, step) for e in episodes]
        for found in anchors:
            for a in found:
                peers.setdefault(a.key, dataclasses.replace(
                    a, source="peer" if a.source == "historical" else a.source))
        records: list[CounterfactualRecord] = []
        used = {s: 0 for s in ("peer", "historical", "induced")}
        if self.config.branch.points != "none":
            used["branch"] = 0
        corrections = verified_replies(episodes)
        # A turn that one of an episode's own branches passed from the same state, in any stage:
        # the anchor of last resort (peer anchors, other episodes', are off in stages 1-2)
        own: dict[tuple, Anchor] = {}
        for e, found in zip(episodes, anchors):
            for a in found if e.branch else ():
                own.setdefault((e.sample, *a.key), dataclasses.replace(a, source="branch"))
        if stage.counterfactual:
            for e in episodes:
                for log in e.turns[e.inherited_turns:]:  # a branch's own turns
                    if not log.failed or not log.replies:
                        continue
                    key = (e.task_id, log.turn, log.state_key)
                    anchor = (choose_anchor(key, peers, self.pool, step, sources)
                              or own.get((e.sample, *key)))
                    if anchor is None:
                        continue
                    found = records_for_turn(
                        e.task_id, log.turn, e.sample, stage.stage, log.replies, anchor,
                        e.conversation.training_ids, self._renderer(e), self.tokenizer.reply_end_id)
                    found = [corrected(r, corrections) for r in found]
                    used["branch" if any(r.anchor_source == "branch" for r in found)
                         else anchor.source] += bool(found)
                    records += found
        for found in anchors:
            for a in found:
                self.pool.add(a)
        self.pool.evict_older_than(step)
        return RolloutResult.of(episodes, records, used, self.config.reward)

    def __call__(self, tasks: Sequence[Any], policy: Policy | ReplyEngine, stage: StageConfig,
                 progress: float, step: int, seed: int) -> RolloutResult:
        return self.finish(self.play_tasks(tasks, policy, stage, progress, seed), step)

    def play_tasks(self, tasks: Sequence[Any], policy: Policy | ReplyEngine, stage: StageConfig,
                   progress: float, seed: int) -> Played:
        """The tasks' episodes played to their end with `policy` (branches included): the part
        of a rollout that samples. It reads nothing the slow loop writes, so an asynchronous
        run plays one step's tasks while the learner trains on the step before
        (`seetjax.rl.async_rollouts`)."""
        episodes = self.episodes(tasks, stage, progress, seed)
        times = self.play(episodes, policy)
        times.add(self._branch_late(episodes, policy))
        return Played(episodes, times, stage)

    def finish(self, played: Played, step: int) -> RolloutResult:
        """The slow loop over `played` at RL step `step`: the rollout's result."""
        start = time.perf_counter()
        result = self.slow_loop(played.episodes, played.stage, step)
        played.times.slow_loop_s = time.perf_counter() - start
        result.times = played.times
        return result

    def _anchors(self, episode: Episode, step: int) -> list[Anchor]:
        """The episode's verified-correct turns as anchors (induced when interception helped).
        An anchor's steps are the replies whose calls executed, with those calls: a retried
        attempt's calls that ran are part of the turn that passed (training_context "mask" or
        "keep"); where a reply's executed calls differ from its text, the step's tokens are the
        executed calls rendered, so an anchor step is always a reply the policy can be trained on.
        Replies that called something and executed none of it (intercepted, undone or rejected
        calls) and retried attempts without calls are left out; the turn-ending reply stays."""
        render, stop = self._renderer(episode), self.tokenizer.reply_end_id
        out = []
        for log in episode.turns[episode.inherited_turns:]:
            if not log.passed or not log.replies:
                continue
            steps = []
            for r in log.replies:
                if r.attempt and not r.ran:
                    continue  # intercepted, undone, or a retried format error: nothing happened
                if r.ran == r.calls:
                    steps.append(AnchorStep(r.calls, r.ids))
                elif r.ran:
                    steps.append(AnchorStep(r.ran, tuple(render(r.ran)) + (stop,)))
            out.append(Anchor(episode.task_id, log.turn, log.state_key, tuple(steps),
                              "induced" if log.interceptions else "historical", step))
        return out

    def _renderer(self, episode: Episode) -> Callable[[Sequence[ToolCall]], list[int]]:
        if episode.call_format == "hermes":
            return lambda calls: self.tokenizer.encode("\n".join(c.to_hermes() for c in calls))
        return lambda calls: self.tokenizer.encode(
            "[" + ", ".join(c.to_python() for c in calls) + "]")
