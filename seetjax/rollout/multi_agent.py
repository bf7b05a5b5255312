"""Multi-agent rollouts on the QA search environment: a coordinator and its worker agents.

Each sample of a question is a team. The coordinator (`seetjax.rollout.coordinator`) splits the
question, delegates one sub-question per round to a worker, a search agent on the QA environment
(its own episode, `WorkerEnv`), reads the worker's answer, and ends with the team's answer; at
most `max_rounds` coordinator replies. One shared policy plays every role, conditioned on the
role's system prompt, or each role (`ROLES`) has a policy of its own (`separate_params`: the
caller passes a policy per role, and trains each role's parameters on that role's episodes,
`TeamResult.by_role`).

A round: every live coordinator replies (one policy call over their contexts), the delegated
sub-questions are played as worker episodes (`Rollout.play`, all of the round's workers in one
batch), and their answers are handed to the coordinators, whose replies are then handled as any
episode's (`Episode.reply`). Every coordinator and worker episode is its own training row, with
its own loss mask (only that agent's replies carry loss), so the result is a `RolloutResult`
for the usual batching (`seetjax.rollout.batching.trajectory_batch`); rewards are per-role
credits (`seetjax.rollout.credit`) and its stats add per-role means (`coordinator_*`,
`worker_*`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np

from seetjax.envs.qa_search import run as qa_search
from seetjax.envs.qa_search.corpus import Hop, QATask
from seetjax.envs.qa_search.env import QASearchEnv
from seetjax.errors import invalid
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import reply_text
from seetjax.rollout.coordinator import WORKER_ROLE, CoordinatorEnv
from seetjax.rollout.credit import coordinator_credit, sub_answer_em, worker_credit
from seetjax.rollout.episode import Episode
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import Policy
from seetjax.rollout.result import PlayTimes, RolloutResult
from seetjax.sampling import Completion
from seetjax.seet.config import StageConfig

ROLES = ("coordinator", "worker")


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig:
    """enabled: rollouts are teams; max_rounds: coordinator replies per team (delegations are
    at most max_rounds - 1: the last reply must answer); sub_answer_weight: a worker's bonus for
    a correct sub-answer (`seetjax.rollout.credit`); separate_params: each role trains a
    parameter set (and optimizer state) of its own instead of sharing one policy."""

    enabled: bool = False
    max_rounds: int = 3
    sub_answer_weight: float = 0.5
    separate_params: bool = False

    def __post_init__(self):
        for name in ("enabled", "separate_params"):
            if not isinstance(getattr(self, name), bool):
                raise invalid(self, name, getattr(self, name), "must be True or False")
        if not isinstance(self.max_rounds, int) or isinstance(self.max_rounds, bool) or \
                self.max_rounds < 1:
            raise invalid(self, "max_rounds", self.max_rounds, "must be an integer >= 1")
        weight = self.sub_answer_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
            raise invalid(self, "sub_answer_weight", weight, "must be a number >= 0")


class WorkerEnv(QASearchEnv):
    """A worker's QA search episode under the worker's role prompt; its reward is the credit
    the team gave it."""

    credit: dict[str, float] | None = None

    def episode_reward(self, truncated: bool) -> dict[str, float]:
        if self.credit is None:
            raise RuntimeError("the team's credit is not assigned yet")
        return dict(self.credit)


@dataclasses.dataclass
class Team:
    """One sample of a question: the coordinator's episode and its workers', in round order."""

    task: QATask
    coordinator: Episode
    seed: int  # the coordinator's episode seed; its workers' derive from it
    workers: list[Episode] = dataclasses.field(default_factory=list)

    @property
    def env(self) -> CoordinatorEnv:
        return self.coordinator.env

    def hop(self, delegation: int) -> Hop | None:
        return delegation_hop(self.task, delegation)

    def assign_credit(self, weight: float) -> None:
        team = self.env.team_reward(self.coordinator.truncated).total
        self.env.credit = coordinator_credit(team)
        for r, worker in enumerate(self.workers):
            em = sub_answer_em(worker.env.answered, self.hop(r))
            worker.env.credit = worker_credit(team, em, weight)


@dataclasses.dataclass
class TeamResult(RolloutResult):
    """The episodes of every role (coordinators first) and the teams they came from."""

    teams: list[Team] = dataclasses.field(default_factory=list)

    def stats(self) -> dict[str, float]:
        """`RolloutResult.stats` over all episodes, plus per-role means (`role_stats`)."""
        return {**super().stats(), **role_stats(self.teams)}

    def by_role(self) -> dict[str, RolloutResult]:
        """Each role's episodes as a result of its own (its rewards and groups only): the rows
        one role's parameters train on when each role has its own."""
        coordinators = [t.coordinator for t in self.teams]
        workers = [w for t in self.teams for w in t.workers]
        return {role: RolloutResult.of(episodes, [], {}, self.reward)
                for role, episodes in zip(ROLES, (coordinators, workers))}


def role_stats(teams: Sequence[Team]) -> dict[str, float]:
    """Per role: its reward (credit) and format validity; the coordinators' answer EM, F1 and
    rounds; the workers per team, their sub-answer EM (over workers with a hop) and searches."""
    workers = [(t, r, w) for t in teams for r, w in enumerate(t.workers)]
    team_parts = [t.env.team_reward(t.coordinator.truncated) for t in teams]
    scored = [sub_answer_em(w.env.answered, t.hop(r)) for t, r, w in workers]
    scored = [s for s in scored if s is not None]

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values)) if len(values) else 0.0

    def validity(episodes: Sequence[Episode]) -> float:
        replies = [r for e in episodes for log in e.turns for r in log.replies]
        return mean([float(r.well_formed) for r in replies])

    return {
        "coordinator_reward": mean([t.env.credit["total"] for t in teams]),
        "coordinator_exact_match": mean([p.exact_match for p in team_parts]),
        "coordinator_f1": mean([p.f1 for p in team_parts]),
        "coordinator_rounds": mean([len(t.env.trace().steps) for t in teams]),
        "coordinator_format_validity": validity([t.coordinator for t in teams]),
        "worker_reward": mean([w.env.credit["total"] for _, _, w in workers]),
        "worker_per_team": len(workers) / max(len(teams), 1),
        "worker_sub_answer_em": mean(scored),
        "worker_searches": mean([w.env.search_tools.searches for _, _, w in workers]),
        "worker_format_validity": validity([w for _, _, w in workers]),
    }


class MultiAgentRollout:
    """Plays teams for a batch of questions (see the module docstring). `config.env` is a
    qa_search section and `config.reward.kind` "env" (the credits)."""

    def __init__(self, tokenizer: Tokenizer, config: RolloutConfig, team: MultiAgentConfig):
        self.tokenizer, self.config, self.team = tokenizer, config, team
        self.worker_rollout = Rollout(tokenizer, config)  # plays each round's workers

    def teams(self, tasks: Sequence[QATask], stage: StageConfig, progress: float,
              seed: int) -> list[Team]:
        g = self.config.group_size
        out = []
        for i, task in enumerate(tasks):
            for s in range(g):
                own = seed * 1_000_003 + i * g + s
                env = CoordinatorEnv(self.config.env, self.team.max_rounds)
                out.append(Team(task, Episode(task, s, self.tokenizer, env, stage, progress,
                                              self.config.limits, seed=own), own))
        return out

    def __call__(self, tasks: Sequence[QATask], policy: Policy | Mapping[str, Policy],
                 stage: StageConfig, progress: float, step: int, seed: int) -> TeamResult:
        """The teams' episodes; `policy` plays every role, or maps each of `ROLES` to the
        policy that plays it."""
        coordinating, working = ((policy[r] for r in ROLES) if isinstance(policy, Mapping)
                                 else (policy, policy))
        teams = self.teams(tasks, stage, progress, seed)
        times = PlayTimes()
        for round_ in range(self.team.max_rounds):
            live = [t for t in teams if not t.coordinator.done]
            if not live:
                break
            completions = self._coordinate(live, coordinating, times)
            texts = [reply_text(self.tokenizer, c.tokens, c.finish_reason == "stop")
                     for c in completions]
            delegating = [(t, q) for t, text in zip(live, texts)
                          if (q := t.env.delegation(text)) is not None]
            workers = [self._worker(t, q, round_, stage, progress)
                       for t, q in delegating]
            if workers:
                times.add(self.worker_rollout.play(workers, working))
            start = time.perf_counter()
            for (team, _), worker in zip(delegating, workers):
                team.workers.append(worker)
                team.env.deliver(worker.env.answered,
                                 worker.env.search_tools.searches)
            for team, completion in zip(live, completions):
                team.coordinator.reply(completion)
            times.environment_s += time.perf_counter() - start
        for team in teams:
            team.assign_credit(self.team.sub_answer_weight)
        episodes = [t.coordinator for t in teams] + [w for t in teams for w in t.workers]
        return TeamResult.of(episodes, [], {}, self.config.reward, times, teams=teams)

    def _coordinate(self, live: Sequence[Team], policy: Policy,
                    times: PlayTimes) -> list[Completion]:
        """One reply of every live coordinator: their whole contexts as new sequences."""
        start = time.perf_counter()
        contexts = [[t for s in team.coordinator.conversation.segments for t in s.ids]
                    for team in live]
        policy.start(contexts)
        completions = policy.generate(list(range(len(live))), [[] for _ in live],
                                      [team.coordinator.reply_budget() for team in live])
        times.sampling_s += time.perf_counter() - start
        times.add_call(completions)
        return completions

    def _worker(self, team: Team, question: str, round_: int, stage: StageConfig,
                progress: float) -> Episode:
        """A worker episode on `question`, delegated in round `round_` as the team's next
        delegation (`worker_task`: a round whose reply delegated nothing does not count)."""
        return Episode(worker_task(team.task, question, len(team.workers)), team.coordinator.sample,
                       self.tokenizer, worker_env(self.config.env), stage, progress,
                       self.config.limits, seed=team.seed * 7919 + round_ + 1)


def delegation_hop(task: QATask, delegation: int) -> Hop | None:
    """The hop the worker of a team's `delegation`-th delegation (from 0) answers: the r-th
    delegation answers hop r."""
    return task.hops[delegation] if delegation < len(task.hops) else None


def worker_task(task: QATask, question: str, delegation: int) -> QATask:
    """The worker's task for `question`, the `delegation`-th delegation of a team on `task`:
    scored against the answer of the task's hop `delegation` (the task's answers where it has no
    such hop). Its id names that sub-task, so the workers of every team that answer it form
    one group (`RolloutResult.group_ids`): GRPO compares a hop's workers with each other, not
    with workers on a hop of other difficulty."""
    hop = delegation_hop(task, delegation)
    if hop is None:
        return QATask(f"{task.id}/worker/answer", question, task.answers, ())
    return QATask(f"{task.id}/worker/hop{delegation}", question, (hop.answer,), (hop,))


def worker_env(section: qa_search.QASearchRunConfig) -> WorkerEnv:
    """A worker's environment: the section's QA search episode under the worker's role prompt,
    on the process's shared retriever."""
    return WorkerEnv(qa_search.retriever(section.corpus, section.world, section.distractors,
                                         section.retrieval), section, role=WORKER_ROLE)
