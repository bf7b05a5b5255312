"""Evaluation reports: BFCL accuracy per category and agent metrics from real episodes."""

import json

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.splits import load_split
from seetjax.eval.evaluate import EVAL_STAGE, markdown, report, write_reports
from seetjax.rollout.loop import Rollout, RolloutConfig
from tests.rollout.scripted import ScriptedPolicy

COMPACT = BfclEnvConfig(prompt_style="compact")  # the environment section of these rollouts


def ground_truth_policy(tokenizer, episodes, skip_category=None):
    """Replays each task's ground truth, turn by turn; fails one category on purpose."""
    sent = set()

    def respond(row):
        e = episodes[row]
        turn = e.env.turn
        calls = e.task.ground_truth[turn]
        if (row, turn) in sent or not calls or e.task.category == skip_category:
            return "Done."
        sent.add((row, turn))
        return "[" + ", ".join(c.to_python() for c in calls) + "]"

    return ScriptedPolicy(tokenizer, respond)


def test_report_from_ground_truth_replays(tokenizer, tmp_path):
    tasks = load_split("test", per_category=2)
    assert [t.category for t in tasks] == ["base"] * 2 + ["miss_func"] * 2 + [
        "miss_param"] * 2 + ["long_context"] * 2
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1,
                                               env=BfclEnvConfig(prompt_style="compact",
                                                                 enforce_held_out=False)))
    episodes = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    rollout.play(episodes, ground_truth_policy(tokenizer, episodes, "miss_param"))
    result = report("test", episodes)
    assert result.bfcl.accuracy["base"] == 1.0 and result.bfcl.accuracy["long_context"] == 1.0
    assert result.bfcl.accuracy["miss_param"] < 1.0
    assert result.bfcl.overall == sum(result.bfcl.accuracy.values()) / 4
    assert result.agent.end_to_end_success == sum(e.valid for e in result.entries) / 8
    assert 0 < result.agent.plan_success < 1 and result.agent.step_efficiency == 1.0
    table = markdown([result])
    assert "| test | " in table and "tool selection accuracy" in table
    write_reports([result], str(tmp_path / "eval"))
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved[0]["accuracy"]["base"] == 1.0 and len(saved[0]["entries"]) == 8


def test_evaluation_errors_are_bfcl_raw_until_force_termination(tokenizer):
    """Evaluation shows the API's raw error (no stage marker, no hint, no retry); a policy that
    keeps failing is force-terminated after BFCL's step limit, every turn judged failed."""
    task = load_split("test", per_category=1)[0]
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=1))
    episodes = rollout.episodes([task], EVAL_STAGE, progress=1.0, seed=0)
    rollout.play(episodes, ScriptedPolicy(tokenizer, lambda row: "[no_such_tool(x=1)]"))
    episode = episodes[0]
    errors = [m["content"] for m in episode.conversation.messages if m["role"] == "tool"]
    assert errors and all("no_such_tool" in e for e in errors)
    assert not any("[stage" in e or "Hint:" in e for e in errors)
    assert episode.done and episode.stats()["retries"] == 0
    assert sorted(t.turn for t in episode.turns) == list(range(task.num_turns))
    assert all(t.passed is False for t in episode.turns)
