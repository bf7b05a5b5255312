"""Credit in a multi-agent QA team (`seetjax.rollout.multi_agent`), each episode's reward by role.

    coordinator: team
    worker:      team + sub_answer_weight * EM(worker's answer, its hop's answer)

`team` is the QA reward of the team's final answer (`CoordinatorEnv.team_reward`). A worker's hop
is the task's hop of its round (the r-th delegation answers hop r); where the task has no such
hop, the worker gets the team reward alone (its sub-answer is not scored). Every credit has the
same parts, so the rollout's `env_<part>` means cover both roles.
"""

from __future__ import annotations

from seetjax.envs.qa_search.corpus import Hop
from seetjax.envs.qa_search.reward import exact_match


def coordinator_credit(team: float) -> dict[str, float]:
    return {"team": team, "sub_answer": 0.0, "total": team}


def sub_answer_em(answered: str | None, hop: Hop | None) -> float | None:
    """1.0 when the worker's answer matches its hop's answer, 0.0 when not or when it gave none;
    None where the task has no hop for it."""
    if hop is None:
        return None
    return exact_match(answered, (hop.answer,)) if answered is not None else 0.0


def worker_credit(team: float, sub_answer: float | None, weight: float) -> dict[str, float]:
    sub = sub_answer or 0.0
    return {"team": team, "sub_answer": sub, "total": team + weight * sub}
