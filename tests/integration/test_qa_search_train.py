"""configs/qa_search.py end to end, shortened: the oracle-dialog SFT warm-up, RL on the QA
environment's reward, and the held-out QA evaluation in summary.json, metrics and report.md."""

import json

import pytest

from tests.integration.test_train import launch

# configs/qa_search.py shortened: 1-hop questions of a small world, few steps and questions.
SHORT = ["--config=configs/qa_search.py", "--config.env.world_passages=40",
         "--config.env.max_hops=1", "--config.data.tasks_per_category=4",
         "--config.data.tasks_per_step=2", "--config.rollout.group_size=2",
         "--config.limits.max_reply_tokens=24", "--config.limits.max_turn_tokens=72",
         "--config.eval.per_category=2", "--config.learner.micro_batches=2",
         "--config.sft.run.data.tasks_per_category=8", "--config.sft.run.data.batch_size=2",
         "--config.sft.run.train.steps=4", "--config.sft.run.train.checkpoint_every=4",
         "--config.train.steps=2", "--config.train.checkpoint_every=2"]


@pytest.mark.slow
def test_short_qa_search_run_trains_and_reports_qa_metrics(tmp_path, embedded_dir):
    launch(tmp_path, SHORT)  # one CPU device, as runs have
    evals = json.loads((tmp_path / "summary.json").read_text())["evals"]
    assert list(evals) == ["untrained", "after_sft", "after_rl"]
    for milestone in evals.values():
        assert milestone["env"] == "qa_search" and list(milestone["splits"]) == ["test"]
        test = milestone["splits"]["test"]
        assert test["episodes"] == 2 and len(test["entries"]) == 2
        for entry in test["entries"]:  # what the policy answered, beside the gold answers
            assert entry["question"].endswith("?") and entry["answers"]
            assert entry["answered"] is None or isinstance(entry["answered"], str)
        assert 0.0 <= test["exact_match"] <= test["f1"] + 1e-9 <= 1.0 + 1e-9
        assert test["reward"] == pytest.approx(
            0.5 * test["exact_match"] + 0.5 * test["f1"] + 0.1 * test["format"]
            - test["search_penalty"] - test["timeout_penalty"])
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "rollout/reward" in r]
    assert len(rl) == 2
    assert all({"rollout/env_f1", "rollout/env_searches", "rollout/env_total"} <= set(r)
               for r in rl)
    assert all(r["rollout/reward"] == pytest.approx(r["rollout/env_total"], abs=1e-6)
               for r in rl)
    assert any("learner/grad_variance" in r for r in rl) or all("learner/no_signal" in r
                                                                for r in rl)
    final = rows[-1]
    assert {"eval/qa_test_exact_match", "eval/qa_test_f1", "eval/qa_test_reward",
            "eval/qa_test_searches", "eval/qa_test_search_penalty"} <= set(final)
    assert "eval/untrained_qa_test_f1" in rows[0]
    report = (tmp_path / "report.md").read_text()
    assert "| test EM | test F1 | test reward | test searches |" in report
    assert "## QA evaluation of the final model (greedy)" in report
    assert "| split | questions | EM | F1 | format | searches |" in report
    assert (tmp_path / "curves.png").exists() and (tmp_path / "sft" / "model").exists()
