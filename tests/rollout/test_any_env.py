"""The rollout runs any registered `ToolEnv`: a tiny counting environment with none of SEET's
optional capabilities, end to end; and BFCL through the registry is BFCL played directly."""

from __future__ import annotations

import dataclasses
import re

import ml_collections
import numpy as np

from seetjax.envs import registry
from seetjax.envs.base import EpisodeTrace, StepCode, StepResult, TurnVerdict
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.learner.config import learner_config
from seetjax.learner.update_signal import update_has_signal
from seetjax.rewards import RewardConfig
from seetjax.rl.config import default_config, env_of
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.seet.config import default_stages
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ExecutionErrorKind, ExecutionResult
from tests.rollout.conftest import calls_text
from tests.rollout.scripted import ScriptedPolicy

STAGE1, _, _, STAGE4 = default_stages()


@dataclasses.dataclass(frozen=True)
class CountTask:
    id: str
    targets: tuple[int, ...]  # the total each turn must end at


@dataclasses.dataclass(frozen=True)
class CountConfig:
    max_steps_per_turn: int = 4


class CountEnv:
    """Turn t asks the total to reach targets[t]; `add(n=K)` adds K (0: an error), text that
    starts with "add" but is not such a call is a format error, anything else ends the turn."""

    def __init__(self, config: CountConfig):
        self.config = config

    def reset(self, task: CountTask):
        self.task, self.total, self.turn, self.steps_in_turn = task, 0, 0, 0
        self.steps, self.verdicts = [], []
        return [{"role": "system", "content": "Call add(n=K) to add K."}, self._ask()]

    def step(self, assistant_text: str) -> StepResult:
        text = assistant_text.strip()
        match = re.fullmatch(r"add\(n=(-?\d+)\)", text)
        if text.startswith("add") and match is None:
            result = self._continue(StepCode.FORMAT_ERROR, "Error: write add(n=K).")
        elif match:
            call = ToolCall("add", {"n": int(match[1])})
            if call.args["n"] == 0:
                done = ExecutionResult(call, "Error: n must not be 0.", ExecutionErrorKind.API_ERROR)
            else:
                self.total += call.args["n"]
                done = ExecutionResult(call, f"total={self.total}")
            code = StepCode.CLEAN_CALL if done.ok else StepCode.EXECUTION_ERROR
            result = self._continue(code, done.output, (call,), (done,))
        else:
            verdict = TurnVerdict(self.turn, self.total == self.task.targets[self.turn], True)
            self.turn, self.steps_in_turn = self.turn + 1, 0
            done = self.turn == len(self.task.targets)
            result = StepResult(verdict.turn, StepCode.NO_CALL, () if done else (self._ask(),),
                                verdicts=(verdict,), done=done)
        self.steps.append(result)
        self.verdicts += result.verdicts
        return result

    @property
    def tools(self):
        return None

    def trace(self) -> EpisodeTrace:
        truth = tuple((ToolCall("add", {"n": t}),) for t in self.task.targets)
        return EpisodeTrace(self.task.id, tuple(self.steps), tuple(self.verdicts), truth)

    def _ask(self):
        return {"role": "user", "content": f"Reach {self.task.targets[self.turn]}."}

    def _continue(self, code, output, calls=(), results=()):
        self.steps_in_turn += 1
        return StepResult(self.turn, code, ({"role": "tool", "content": output},), calls, results)


def load_count_tasks(section, data, split, per_category):
    return [CountTask(f"count_{i}", (i + 1, 2 * i + 3)) for i in range(per_category or 2)]


SPEC = registry.register(registry.EnvSpec("count", CountConfig, CountEnv, load_count_tasks))


def test_a_run_config_selects_the_registered_environment():
    config = default_config()
    config.env = ml_collections.ConfigDict(dict(name="count", max_steps_per_turn=2))
    assert env_of(config) == CountConfig(2)
    assert registry.spec_of(CountConfig()) is SPEC


def rollout_of(tokenizer, stage, scripts, kind="progress"):
    """Two tasks x 2 samples; scripts[row] in order, then "Done."."""
    rollout = Rollout(tokenizer, RolloutConfig(group_size=2, env=CountConfig(),
                                               reward=RewardConfig(kind)))
    queues = [list(s) for s in scripts]
    policy = ScriptedPolicy(tokenizer, lambda row: queues[row].pop(0) if queues[row] else "Done.")
    tasks = SPEC.load_tasks(CountConfig(), {}, "train", 2)
    return rollout(tasks, policy, stage, progress=0.0, step=0, seed=0)


def test_episodes_verdicts_rewards_and_batch_of_a_custom_env(tokenizer):
    # count_0: reach 1 then 3; count_1: reach 2 then 5.
    scripts = [["add(n=1)", "Done.", "add(n=2)", "Done."],  # both turns
               ["add(n=1)", "Done.", "Done."],  # the second turn fails
               ["add(n=2)", "Done.", "add(n=3)", "Done."],
               ["Done.", "add(n=4)", "Done."]]  # both turns fail
    result = rollout_of(tokenizer, STAGE4, scripts)
    assert [e.task_id for e in result.episodes] == ["count_0"] * 2 + ["count_1"] * 2
    assert result.group_ids().tolist() == [0, 0, 1, 1]
    assert [[t.passed for t in e.turns] for e in result.episodes] == [
        [True, True], [True, False], [True, True], [False, False]]
    assert [[v.passed for v in e.trace().verdicts] for e in result.episodes] == [
        [True, True], [True, False], [True, True], [False, False]]
    np.testing.assert_allclose(result.rewards(), [1.0, 0.5, 1.0, 0.0])
    assert result.stats()["format_validity"] == 1.0

    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    assert update_has_signal(learner_config({"algorithm": "rloo"}), batch)
    np.testing.assert_allclose(batch.rewards, [1.0, 0.5, 1.0, 0.0])
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    for row, episode in enumerate(result.episodes):
        tokens = episode.conversation.training_arrays()[0]
        assert np.asarray(batch.sequences.tokens)[row, :len(tokens)].tolist() == tokens.tolist()
        # Only the policy's replies carry loss: one stop token closes each.
        trained = np.asarray(batch.sequences.tokens)[row][np.asarray(
            batch.sequences.loss_mask)[row] > 0].tolist()
        assert trained.count(tokenizer.reply_end_id) == len(episode.trace().steps)


def test_seet_fast_loop_and_anchors_on_a_custom_env(tokenizer):
    # count_0's first sample stumbles (a format error, then an execution error, both retried)
    # before passing; each task's second sample fails turn 0, so its group's peer anchor gives a
    # counterfactual record.
    scripts = [["add(n=", "add(n=0)", "add(n=1)", "Done.", "add(n=2)", "Done."],
               ["Done.", "add(n=2)", "Done."],
               ["add(n=2)", "Done.", "add(n=3)", "Done."],
               ["add(n=1)", "Done.", "add(n=4)", "Done."]]
    stage = dataclasses.replace(STAGE1, peer_anchors=True)
    result = rollout_of(tokenizer, stage, scripts)
    first = result.episodes[0]
    assert [t.passed for t in first.turns] == [True, True]
    assert first.turns[0].retries == 2 and first.turns[0].hints == 0  # no Hints capability
    assert [r.attempt for r in first.turns[0].replies] == [True, True, False, False]
    tool = [m["content"] for m in first.conversation.messages if m.get("role") == "tool"]
    assert tool[0].startswith(stage.marker())  # the stage's marker on error feedback
    assert result.stats()["retries"] == 0.5
    # FPLD against the peer anchor: count_0's anchor keeps its retried add(n=0), which ran.
    assert [(r.task_id, r.turn, r.sample, r.divergence.kind) for r in result.records] == [
        ("count_0", 0, 1, "missing_call"), ("count_1", 0, 1, "argument")]
    assert result.anchors_used == {"peer": 2, "historical": 0, "induced": 0}
    assert trajectory_batch(result, pad_id=tokenizer.pad_id, max_pairs=2,
                            pair_seed=0).pairs is not None


def test_bfcl_through_the_registry_is_bfcl_played_directly(play, task):
    """An episode of the rollout (environment made by the registry) records what BfclEnv given
    the same replies records."""
    replies = ["[cd(folder='nowhere')]", calls_text(task.ground_truth[0]), "Done.", "[oops(",
               "Done.", "Done.", "Done."]
    _, (episode,) = play([task], STAGE4, [replies])
    direct = BfclEnv(BfclEnvConfig(prompt_style="compact"))
    assert direct.reset(task) == episode.env.history[:len(direct.history)]
    for message in [m["content"] for m in episode.env.history if m["role"] == "assistant"]:
        direct.step(message)
    assert direct.history == episode.env.history
    assert direct.trace() == episode.trace()
    assert episode.turns[0].passed and not episode.turns[1].passed
