"""configs/qa_multi_agent.py end to end, shortened as test_qa_search_train shortens
configs/qa_search.py: the SFT warm-up (the oracle team's dialogs), two RL steps of team rollouts
(coordinator and worker rows in one batch), per-role metrics in metrics.jsonl and report.md."""

import json

import pytest

from tests.integration.test_qa_search_train import SHORT
from tests.integration.test_train import launch

# 1-hop questions: with two coordinator replies the oracle team's warm-up delegates one hop
TEAM = ["--config=configs/qa_multi_agent.py", "--config.env.max_hops=1",
        "--config.multi_agent.max_rounds=2",
        # a KL term always pulls: the update runs on the team batch even when every
        # credit is equal (the tiny model answers nothing right)
        "--config.learner.loss.kl_coef=0.01",
        *(flag for flag in SHORT if not flag.startswith(("--config=", "--config.env.max_hops")))]


@pytest.mark.slow
def test_short_multi_agent_run_trains_and_reports_per_role_metrics(tmp_path, embedded_dir):
    launch(tmp_path, TEAM)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "rollout/reward" in r]
    assert len(rl) == 2
    for r in rl:
        assert 1.0 <= r["rollout/coordinator_rounds"] <= 2.0
        assert 0.0 <= r["rollout/worker_per_team"] <= 1.0
        assert {"rollout/coordinator_reward", "rollout/coordinator_exact_match",
                "rollout/worker_reward", "rollout/worker_sub_answer_em",
                "rollout/worker_searches", "rollout/env_team"} <= set(r)
        assert "learner/no_signal" not in r and "learner/grad_variance" in r
    report = (tmp_path / "report.md").read_text()
    assert "## Per role (multi-agent rollouts)" in report
    assert "| coordinator |" in report and "| worker |" in report
    assert (tmp_path / "sft" / "model").exists()
