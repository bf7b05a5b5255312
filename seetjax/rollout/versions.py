"""Policy versions of the tokens a step trains on: how many weight versions its rows hold, the
share of the newest, the oldest, and its staleness behind the learner (the figures AReaL,
arXiv:2505.24298, bounds in asynchronous RL; in synchronous RL every token is of the newest
version and the staleness is 0). Counted over the sampled tokens of the training rows, as
`TrajectoryBatch.versions` holds them (masked attempts included: they are the context the
trained tokens were sampled in)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from seetjax.rollout.episode import Episode


def version_counts(episodes: Sequence[Episode]) -> Counter[int]:
    """Sampled tokens of the episodes' training rows by the policy version that sampled them;
    tokens of an unversioned policy (-1) are not counted."""
    counts: Counter[int] = Counter()
    for e in episodes:
        versions = e.conversation.training_versions()
        counts.update(versions[versions >= 0].tolist())
    return counts


def version_stats(episodes: Sequence[Episode], learner_step: int) -> dict[str, float]:
    """`versions` (distinct versions in the rows), `newest_version_share` (of their sampled
    tokens), `oldest_version` and `staleness` (learner_step - oldest_version), for the learner
    at update `learner_step`; empty when no token has a version."""
    counts = version_counts(episodes)
    if not counts:
        return {}
    oldest, newest = min(counts), max(counts)
    return {"versions": float(len(counts)),
            "newest_version_share": counts[newest] / sum(counts.values()),
            "oldest_version": float(oldest), "staleness": float(learner_step - oldest)}


def fresh_episodes(episodes: Sequence[Episode], learner_version: int, max_staleness: int
                   ) -> tuple[list[Episode], int]:
    """The episodes whose task group sampled no token more than `max_staleness` versions behind
    `learner_version`, and how many were dropped: a group goes whole (its episodes are each
    other's baseline, branches included). Asynchronous RL's bound on what it trains on (AReaL,
    arXiv:2505.24298, section 5.1)."""
    stale = set()
    for e in episodes:
        versions = e.conversation.training_versions()
        sampled = versions[versions >= 0]
        if sampled.size and learner_version - int(sampled.min()) > max_staleness:
            stale.add(e.task_id)
    kept = [e for e in episodes if e.task_id not in stale]
    return kept, len(episodes) - len(kept)
