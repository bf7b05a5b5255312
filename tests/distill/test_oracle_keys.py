"""The oracle teacher finds a scenario by its id (sent with every request), never by the
conversation's first user message: scenarios sharing an opening get each its own ground truth
and its own review count."""

import asyncio

from seetjax.distill.endpoints import RunBudget
from seetjax.distill.episode import play
from seetjax.distill.load import parse_config
from seetjax.distill.pools import Pool
from seetjax.distill.prompts import system_prompt
from seetjax.distill.review import review
from seetjax.distill.scenarios import FAMILIES
from seetjax.distill.servers import Oracle, oracle_app, review_script
from tests.distill.distilllib import endpoint, raw_config, with_urls
from tests.serving.servinglib import LiveServer


def _twins(raw):
    """Scenarios 622 and 661 of telecom/easy/0: the same first user message, other amounts due."""
    spec = parse_config(raw).scenarios[0]
    first, second = (FAMILIES["telecom"].scenario(spec, i) for i in (622, 661))
    assert first.task.turns[0] == second.task.turns[0]
    assert first.task.ground_truth != second.task.ground_truth
    return first, second


async def _play_and_review(config, scenarios):
    teachers = Pool("teacher_pool", config.teacher_pool, config, RunBudget())
    reviewers = Pool("reviewer_pool", config.reviewer_pool, config, RunBudget())
    try:
        out = []
        for scenario in scenarios:
            attempt = await play(scenario, system_prompt(config, scenario), teachers, config)
            verdict, _ = await review(reviewers, scenario, attempt.turns, config, 0)
            out.append((attempt, verdict))
        return out
    finally:
        await teachers.close()
        await reviewers.close()


def test_scenarios_sharing_a_first_message_get_their_own_ground_truth_and_reviews(tmp_path):
    raw = raw_config(tmp_path, [{"family": "telecom", "quota": 662, "difficulty": "easy"}],
                     reviewer_pool=[endpoint("judge", "http://127.0.0.1:9/v1")])
    twins = _twins(raw)
    script = review_script({0: {"score": 0.4, "needs_revision": True},
                            1: {"score": 0.9, "needs_revision": False}})
    with LiveServer(oracle_app(Oracle(twins, review_policy=script))) as live:
        config = with_urls(raw, {"oracle": live.url, "judge": live.url})
        results = asyncio.run(_play_and_review(config, twins))
    for (attempt, verdict), scenario in zip(results, twins):
        assert not attempt.failure and attempt.result.valid, (scenario.id, attempt.result)
        assert attempt.trace.steps[0].calls == scenario.task.ground_truth[0]
        assert verdict.score == 0.4, scenario.id  # each scenario's first review
