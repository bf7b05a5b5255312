"""Single-turn evaluation: replies read in every prompt style, BFCL's aggregates, the tables."""

import json

import pytest

from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn_checker import SingleTurnResult, check
from seetjax.eval import single_turn_eval
from seetjax.eval.evaluate import SplitReport
from seetjax.rollout.episode import EpisodeLimits
from seetjax.tools.prompts import PROMPT_STYLES
from tests.envs.bfcl.single_turn_perturb import ground_truth
from tests.rollout.scripted import ScriptedPolicy


def _reply(task, config):
    """The ground truth written as `config`'s style answers."""
    calls = ground_truth(task, underscore_to_dot=bfcl_single.underscored_names(config))
    if config.resolved_call_format == "hermes":
        return "\n".join(c.to_hermes() for c in calls)
    return "[" + ", ".join(c.to_python() for c in calls) + "]"


AST = bfcl_single.load(bfcl_single.NON_LIVE_AST + bfcl_single.LIVE_AST)


@pytest.mark.parametrize("style,decoding", [*((s, "lenient") for s in PROMPT_STYLES),
                                            ("bfcl", "official"), ("compact", "official")])
def test_ground_truth_replies_read_back_to_their_calls_in_every_style(style, decoding):
    """Every AST entry's ground truth, written as the style answers and read back: the verdict
    is the checker's on the calls themselves (all pass but BFCL's few quirky answers)."""
    config = BfclEnvConfig(prompt_style=style, decoding=decoding)
    results = single_turn_eval.check_replies(AST, [_reply(t, config) for t in AST], config)
    failing = {t.id for t in AST if not check(t, ground_truth(t)).valid}
    assert {r.task_id for r in results if not r.valid} == failing and len(failing) < 10
    irrelevance = bfcl_single.load(["irrelevance", "live_relevance"], per_category=2)
    results = single_turn_eval.check_replies(irrelevance, ["I cannot help with that."] * 4, config)
    assert [r.valid for r in results] == [True, True, False, False]


def test_replies_are_generated_in_batches_and_a_prompt_too_long_fails(tokenizer):
    config = BfclEnvConfig(prompt_style="compact")
    tasks = bfcl_single.load(["simple", "irrelevance"], per_category=3)
    lengths = [len(tokenizer.chat_ids(*bfcl_single.opening(t, config), add_generation_prompt=True))
               for t in tasks]
    longest = max(lengths)
    limits = EpisodeLimits(max_reply_tokens=16, max_episode_tokens=longest)  # room for all but one
    batches = []

    class Recording(ScriptedPolicy):
        def start(self, prompts):
            batches.append([len(p) for p in prompts])

    policy = Recording(tokenizer, lambda row: "No tool fits.")
    replies = single_turn_eval.generate_replies(tasks, policy, tokenizer, config, limits,
                                                batch_size=2)
    assert [r is None for r in replies] == [n == longest for n in lengths]
    assert [len(b) for b in batches] == [2, 2, 1] and sum(batches, []) == sorted(sum(batches, []))
    results = single_turn_eval.check_replies(tasks, replies, config)
    assert [r.valid for r in results] == [False] * 3 + [n != longest for n in lengths[3:]]
    assert {r.error_type for r, n in zip(results, lengths) if n == longest} == {
        single_turn_eval.NO_REPLY}


def _results(category, passed, failed):
    return [SingleTurnResult(f"{category}_{i}", category, i < passed) for i in range(passed + failed)]


def test_aggregates_follow_the_leaderboards_formulas(tmp_path):
    results = (_results("simple", 3, 1) + _results("multiple", 1, 1)  # 0.75, 0.5
               + _results("live_simple", 1, 0) + _results("live_multiple", 1, 3)  # 1/1, 1/4
               + _results("irrelevance", 1, 0) + _results("live_irrelevance", 0, 2)
               + _results("live_relevance", 1, 1))
    report = single_turn_eval.SingleTurnReport("single-turn", tuple(results))
    assert report.aggregates == pytest.approx({
        "non_live_ast": (0.75 + 0.5) / 2,  # unweighted mean of the categories present
        "live_ast": 2 / 5,  # weighted by size
        "irrelevance": (1.0 + 0.0) / 2, "relevance": 0.5})
    table = single_turn_eval.markdown([report])
    assert "| single-turn | 75.0 | 50.0 | 100.0 | 25.0 | 100.0 | 0.0 | 50.0 | 16 |" in table
    multi = SplitReport("test", bfcl=type("B", (), {"overall": 0.25})(), agent=None, entries=())
    board = single_turn_eval.leaderboard_markdown(["lenient", "official"], ["train", "test"],
                                                  [report], [multi])
    assert "| multi-turn test |" in board and "multi-turn train" not in board
    assert "| lenient | 62.5 | 40.0 | 50.0 | 50.0 | 25.0 |" in board
    assert "| official | - | - | - | - | - |" in board
    single_turn_eval.write_reports([report], str(tmp_path / "eval"))
    saved = json.loads((tmp_path / "eval.single_turn.json").read_text())
    assert saved[0]["total"]["live_multiple"] == 4 and len(saved[0]["entries"]) == len(results)
