"""One SEET episode: the fast loop, hints, markers, interception, context modes, token caps."""

import numpy as np

from seetjax.data.dialogs import Dialog
from seetjax.data.formatter import format_dialog
from seetjax.envs.bfcl.data import load_tasks
from seetjax.rollout.chat import cap_observation
from seetjax.rollout.episode import Episode, EpisodeLimits
from seetjax.seet.config import StageConfig
from tests.rollout.conftest import calls_text

AUGMENTED = StageConfig(stage=1, env_mode="augmented", retry_budget=1)
STANDARD = StageConfig(stage=4, env_mode="standard", retry_budget=0, retry_probability_start=0.0,
                       retry_probability_end=0.0)


def feedback_texts(tokenizer, episode):
    return [tokenizer.decode(s.ids) for s in episode.conversation.segments
            if s.kind == "observation"]


def test_format_error_is_retried_once_with_a_budget_of_one(play, task, tokenizer):
    _, (e,) = play([task], AUGMENTED, [["[cd(folder=", "[cd(folder="]])
    first = e.turns[0]
    assert first.retries == 1
    assert [r.well_formed for r in first.replies] == [False, False]
    assert [r.attempt for r in first.replies] == [True, False]  # only the first was retried
    assert first.passed is False and e.turns[1].turn == 1  # the second one ended the turn
    feedback = feedback_texts(tokenizer, e)[0]
    assert feedback.startswith("\n<|im_start|>tool\n[stage 1 | augmented] Error: could not parse")
    assert "Hint: Your message could not be read as tool calls" in feedback
    assert "e.g. [" in feedback  # an example call of an available tool


def test_execution_error_gets_a_state_hint_in_augmented_mode_only(play, task, tokenizer):
    script = [["[cd(folder='nope')]"] + [calls_text(task.ground_truth[0])]]
    _, (aug,) = play([task], AUGMENTED, script)
    hint = feedback_texts(tokenizer, aug)[0]
    assert "[stage 1 | augmented]" in hint and "Hint: You are in `/workspace`" in hint
    assert "`document`" in hint  # the live directory contents
    assert aug.turns[0].retries == 1 and aug.turns[0].hints == 1 and aug.turns[0].passed
    _, (std,) = play([task], STANDARD, script)
    raw = feedback_texts(tokenizer, std)[0]
    assert "Hint:" not in raw and "[stage 4 | standard]" in raw and "No such" in raw
    assert std.turns[0].retries == 0 and std.turns[0].hints == 0
    no_marker = StageConfig(stage=4, env_mode="standard", feedback_marker=False)
    _, (plain,) = play([task], no_marker, script)
    assert "[stage" not in feedback_texts(tokenizer, plain)[0]


def test_interception_passes_a_correct_prefix_and_blocks_a_wrong_call(play, task, tokenizer):
    stage = StageConfig(stage=2, env_mode="augmented", interception=True)
    script = [["[cd(folder='document')]", "[mkdir(dir_name='wrong')]", "Done.",
               "[mkdir(dir_name='temp'), mv(source='final_report.pdf', destination='temp')]",
               "Done."]]
    _, (e,) = play([task], stage, script)
    log = e.turns[0]
    assert [r.attempt for r in log.replies] == [False, True, True, False, False]
    assert log.interceptions == 2 and log.passed
    assert [c.name for c in log.accepted] == ["cd", "mkdir", "mv"]
    fs = e.env.executor.instances["GorillaFileSystem"]
    assert "wrong" not in fs.ls()["current_directory_content"]  # the blocked call never ran
    feedback = feedback_texts(tokenizer, e)
    assert "wrong value for `dir_name`" in feedback[1] and "`mkdir`" in feedback[1]
    assert "not finished yet: call `mkdir` next" in feedback[2]
    assert "dir_name='temp'" not in feedback[1]  # arguments are not revealed by default


def test_interception_follows_bfcls_order_semantics(play, task, tokenizer):
    """BFCL judges a turn by end state and outputs, not call order: a reordering of the turn's
    ground truth that ends the same passes interception; one that changes the outcome does not."""
    stage = StageConfig(stage=2, env_mode="augmented", interception=True)
    commuting = load_tasks("base")[32]  # turn 0: cat(Spring2023Draft), wc(Spring2023Draft)
    cat, wc = commuting.ground_truth[0]
    _, (e,) = play([commuting], stage, [[calls_text([wc]), calls_text([cat]), "Done."]])
    assert e.turns[0].interceptions == 0 and e.turns[0].passed
    strict = StageConfig(stage=2, env_mode="augmented", interception=True, order_free=False)
    _, (e,) = play([commuting], strict, [[calls_text([wc, cat]), calls_text([cat, wc]), "Done."]])
    assert e.turns[0].interceptions == 1 and e.turns[0].passed
    # mkdir before cd creates temp in the wrong folder: blocked, the hint asks for cd
    cd, mkdir, mv = task.ground_truth[0]
    _, (e,) = play([task], stage, [[calls_text([mkdir, cd, mv]), calls_text([cd, mkdir, mv]),
                                    "Done."]])
    log = e.turns[0]
    assert log.interceptions == 1 and log.passed
    assert log.replies[0].attempt and log.replies[0].ran == ()  # intercepted: nothing ran
    assert "used `mkdir` where `cd` was needed" in feedback_texts(tokenizer, e)[0]


def test_masks_cover_exactly_the_policy_tokens(play, task, tokenizer):
    """Token in, token out: the training sequence is the template's rendering of the episode,
    and the mask is 1 exactly on the replies (failed attempts masked in 'mask' mode)."""
    script = [["[cd(folder='nope')]", calls_text(task.ground_truth[0])]]
    _, (e,) = play([task], AUGMENTED, script)
    tokens, mask, _ = e.conversation.training_arrays()
    rendered = tokenizer.chat_ids(e.conversation.messages, e.conversation.tools)
    assert tokens.tolist() + tokenizer.encode("\n") == rendered
    expected = np.concatenate([np.full(len(s.ids), float(s.kind == "reply" and not s.masked))
                               for s in e.conversation.segments])
    np.testing.assert_array_equal(mask, expected)
    replies = [s for s in e.conversation.segments if s.kind == "reply"]
    assert replies[0].masked and not replies[1].masked  # the retried failure carries no loss
    assert mask.sum() == sum(len(s.ids) for s in replies[1:])
    assert all(tokens[mask > 0] != tokenizer.pad_id)


def test_drop_mode_leaves_the_attempt_out_and_undoes_its_effects(play, task, tokenizer):
    stage = StageConfig(stage=1, retry_budget=1, training_context="drop")
    script = [["[mkdir(dir_name='x'), cd(folder='nope')]", calls_text(task.ground_truth[0])]]
    _, (e,) = play([task], stage, script)
    assert "x" not in e.env.executor.instances["GorillaFileSystem"].root.contents
    assert e.turns[0].passed and [c.name for c in e.turns[0].accepted] == ["cd", "mkdir", "mv"]
    assert [r.ran for r in e.turns[0].replies][0] == ()  # the undone attempt's mkdir did not run
    tokens, mask, _ = e.conversation.training_arrays()
    assert "nope" not in tokenizer.decode(tokens)  # neither the attempt nor its feedback
    _, (kept,) = play([task], StageConfig(stage=1, retry_budget=1, training_context="keep"),
                      script)
    assert "x" in kept.env.executor.instances["GorillaFileSystem"].root.contents
    assert [c.name for c in kept.turns[0].replies[0].ran] == ["mkdir", "cd"]  # both ran
    assert "nope" in tokenizer.decode(kept.conversation.training_arrays()[0])


def test_turn_token_cap_ends_the_turn_and_episode_cap_truncates(play, task):
    call = "[pwd()]"
    _, (e,) = play([task], STANDARD, [[call] * 50], limits=EpisodeLimits(max_turn_tokens=40))
    assert e.turns[0].tokens >= 40 and e.turns[0].passed is False
    assert len(e.turns[0].replies) < 50
    _, (cut,) = play([task], STANDARD, [[call] * 200],
                     limits=EpisodeLimits(max_turn_tokens=10_000, max_episode_tokens=900))
    assert cut.truncated and cut.conversation.num_tokens >= 900
    assert len(cut.turns) == task.num_turns and all(t.passed is False for t in cut.turns)
    assert cut.progress_reward() == 0.0


def test_a_step_that_ends_the_episode_is_never_retried(play, task, tokenizer):
    """Past BFCL's step limit the episode is over: the failing step that ended it is not granted
    a retry (a retry would count against the budget and label the last step an attempt)."""
    from seetjax.envs.bfcl.env import BfclEnvConfig
    from seetjax.rollout.loop import Rollout, RolloutConfig

    generous = StageConfig(stage=1, env_mode="augmented", retry_budget=10)
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, env=BfclEnvConfig(
        prompt_style="compact", max_steps_per_turn=2)))
    _, (e,) = play([task], generous, [["[cd(folder='nope')]"] * 6], rollout=rollout)
    replies = e.turns[0].replies
    assert e.done and len(replies) == 3  # two steps allowed, the third ends the episode
    assert [r.attempt for r in replies] == [True, True, False]
    assert e.turns[0].retries == 2 and e.trace().steps[-1].timeout


def test_an_error_in_one_episode_ends_only_that_episode(play, task, tokenizer, monkeypatch,
                                                         caplog):
    """The fault boundary: reply handling that raises ends its own episode as failed (logged and
    counted); the other episodes of the batch play on."""
    from seetjax.rollout.result import RolloutResult

    real_step = Episode.on_reply

    def flaky(self, completion):
        if self.sample == 1:
            raise RuntimeError("boom")
        return real_step(self, completion)

    monkeypatch.setattr(Episode, "on_reply", flaky)
    script = [[calls_text(task.ground_truth[0])]] * 2
    with caplog.at_level("WARNING"):
        _, (good, bad) = play([task], STANDARD, script, group_size=2)
    assert good.error is None and good.turns[0].passed
    assert bad.done and bad.error == "RuntimeError: boom"
    assert all(t.passed is False for t in bad.turns) and len(bad.turns) == task.num_turns
    assert bad.progress_reward() == 0.0 and "ended by an error" in caplog.text
    assert RolloutResult([good, bad], [], {}).stats()["errors"] == 0.5


def test_an_attempt_cut_off_by_the_context_is_still_excluded(play, task):
    """A retried failure whose feedback no longer fits ends the episode; the attempt is still a
    failed attempt: masked from the loss like every retried one before it."""
    stage = StageConfig(stage=1, env_mode="augmented", retry_budget=1000)
    _, (e,) = play([task], stage, [["[cd(folder='nope')]"] * 200],
                   limits=EpisodeLimits(max_turn_tokens=10_000, max_episode_tokens=2000))
    replies = [s for s in e.conversation.segments if s.kind == "reply"]
    assert e.truncated and len(replies) > 3
    assert all(r.attempt for r in e.turns[0].replies)  # every reply a granted retry
    assert all(s.masked for s in replies)


def test_a_long_observation_is_cut_as_sft_dialogs_cut_it(play, task, tokenizer):
    """Rollouts show a long tool output cut to `max_observation_tokens` and marked; SFT dialogs
    with `data.max_observation_tokens` cut it the same way, so the warm-up sees what the policy
    will."""
    _, (e,) = play([task], STANDARD, [["[ls(a=True)]"]],
                   limits=EpisodeLimits(max_observation_tokens=4))
    raw = next(m for m in e.env.history if m["role"] == "tool")
    cut = cap_observation(raw, tokenizer, 4)["content"]
    assert len(tokenizer.encode(raw["content"])) > 4 and cut.endswith(" ...[truncated]")
    shown = feedback_texts(tokenizer, e)[0]
    assert cut in shown and raw["content"] not in shown
    dialog = Dialog("d", [*e.env.history[:2], {"role": "assistant", "content": "[ls(a=True)]"},
                          raw, {"role": "assistant", "content": "Done."}])
    text = tokenizer.decode(format_dialog(dialog, tokenizer, max_observation_tokens=4).tokens)
    assert cut in text and raw["content"] not in text
    assert raw["content"] in tokenizer.decode(format_dialog(dialog, tokenizer).tokens)  # 0: whole


def test_the_fault_boundary_covers_reset_trace_and_exits(play, task, monkeypatch, caplog):
    """An environment whose reset or trace raises, and a tool that calls exit(), fail their own
    episode (logged, counted); the rest of the batch plays and is scored as usual."""
    import sys

    from seetjax.envs.bfcl.data import api_class
    from seetjax.envs.bfcl.env import BfclEnv
    from seetjax.rollout.result import RolloutResult

    unstarted, lost, exits = load_tasks("base")[1:4]
    real_reset, real_trace = BfclEnv.reset, BfclEnv.trace

    def reset(self, t):
        if t is unstarted:
            raise RuntimeError("no scenario")
        return real_reset(self, t)

    def trace(self):
        if self.task is lost and self.turn >= 1:
            raise ValueError("lost the record")
        return real_trace(self)

    monkeypatch.setattr(BfclEnv, "reset", reset)
    monkeypatch.setattr(BfclEnv, "trace", trace)
    monkeypatch.setattr(api_class("GorillaFileSystem"), "pwd", lambda self: sys.exit(3))
    scripts = [[calls_text(task.ground_truth[0])], [], [calls_text(lost.ground_truth[0])],
               ["[pwd()]"]]
    with caplog.at_level("WARNING"):
        _, episodes = play([task, unstarted, lost, exits], STANDARD, scripts)
    result = RolloutResult(episodes, [], {})
    stats = result.stats()  # the lost record is found missing here, when scoring
    good, *failed = episodes
    assert good.error is None and good.turns[0].passed and good.progress_reward() > 0
    assert [e.error for e in failed] == ["RuntimeError: no scenario",
                                         "ValueError: lost the record", "SystemExit: 3"]
    assert not failed[0].turns[0].replies and failed[0].task_id == unstarted.id
    for e in failed:
        assert e.done and e.turns[-1].passed is False and e.progress_reward() == 0.0
    assert stats["errors"] == 0.75 and list(result.rewards()[1:]) == [0.0] * 3
    assert "no scenario" in caplog.text and "SystemExit" in caplog.text
    # training leaves out the episode that never started (the policy never acted), counted;
    # the episodes that failed on the policy's watch stay in their groups
    trained = RolloutResult.of(episodes, [], {})
    assert trained.episodes == [good, failed[1], failed[2]]
    assert (trained.unstarted, trained.left_out) == (1, 1)
    assert trained.stats()["episodes_unstarted"] == 1.0


def test_a_keyboard_interrupt_still_stops_the_run(play, task, monkeypatch):
    """KeyboardInterrupt is how a user stops a run: no episode boundary swallows it."""
    import pytest

    def interrupted(self, completion):
        raise KeyboardInterrupt

    monkeypatch.setattr(Episode, "on_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        play([task], STANDARD, [["Done."]])
