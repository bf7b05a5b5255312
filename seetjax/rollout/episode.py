"""One episode of any `ToolEnv` under SEET: the policy's replies in, the next tokens to append out.

Per reply: stage-2 interception (a call departing from the turn's ground truth is not executed and
a corrective hint is shown), then the environment step, then the fast loop (a failed step may be
retried within the stage's budget and probability; the decision is taken before the retry is
counted), then the augmented environment's hint and the stage marker on error feedback. Turn
verdicts, executed calls and every reply are logged for rewards, anchors and the slow loop. Each
mechanism applies where the environment has the capability it needs
(`seetjax.envs.capabilities`); BFCL has them all.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.envs.base import EpisodeTrace, StepCode, StepResult, ToolEnv
from seetjax.envs.capabilities import GroundTruth, Hints, ReadsCalls, Rewindable, ScoresEpisodes
from seetjax.envs.state_keys import state_key as env_state_key
from seetjax.errors import invalid, require_int
from seetjax.models.tokenizer import Tokenizer
from seetjax.rewards import RewardConfig, assigned_rewards, progress_reward
from seetjax.rollout.chat import Conversation, cap_observation
from seetjax.rollout.turn_log import TurnLog
from seetjax.sampling import Completion
from seetjax.seet.anchors import state_key
from seetjax.seet.config import StageConfig
from seetjax.seet.curriculum import grant_retry
from seetjax.seet.interception import intercept
from seetjax.seet.records import StepView
from seetjax.tools.calls import ParseError, ToolCall
from seetjax.tools.executor import ExecutionErrorKind

logger = logging.getLogger(__name__)
_NOT_RUN = (ExecutionErrorKind.UNKNOWN_FUNCTION, ExecutionErrorKind.INVALID_ARGUMENTS)
# What ends one episode at its fault boundary, not the run: any error, and SystemExit (a tool or
# an environment calling exit()). KeyboardInterrupt is not caught: it is how a user stops a run.
FAULTS = (Exception, SystemExit)
_UNSTARTED = "The environment failed to start this episode."


@dataclasses.dataclass(frozen=True)
class EpisodeLimits:
    """Token caps: per reply, per turn (all replies of a turn), per tool observation, per
    episode (the whole context, the closing token of a cut-off reply included: an episode never
    grows past it, so its training sequence, and a counterfactual pair's prefix plus step, fit in
    max_episode_tokens + max_reply_tokens)."""

    max_reply_tokens: int = 256
    max_turn_tokens: int = 1024
    max_observation_tokens: int = 1024
    max_episode_tokens: int = 8192

    def __post_init__(self):
        for name in ("max_reply_tokens", "max_turn_tokens", "max_observation_tokens",
                     "max_episode_tokens"):
            require_int(self, name, getattr(self, name), 1)
        if self.max_episode_tokens <= self.max_reply_tokens + 2:
            raise invalid(self, "max_episode_tokens", self.max_episode_tokens, "must exceed "
                          f"max_reply_tokens + 2 = {self.max_reply_tokens + 2}: the "
                             "prompt needs room too")


class Episode:
    """A task, one sample of it, its environment (fresh, of the task's kind) and conversation."""

    def __init__(self, task: Any, sample: int, tokenizer: Tokenizer, env: ToolEnv,
                 stage: StageConfig, progress: float, limits: EpisodeLimits, seed: int):
        self.task, self.sample, self.stage, self.progress = task, sample, stage, progress
        self.limits = limits
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        self.env = env
        self.error: str | None = None  # what ended the episode at its fault boundary, if anything
        self.task_id, self._truth = str(getattr(task, "id", task)), ()
        try:
            opening, tools = self.env.reset(task), self.env.tools
            started = self.env.trace()
            self.task_id, self._truth = started.task_id, started.ground_truth
        except FAULTS as e:  # the episode fails; its prompt only says so (it gets no reply)
            opening, tools, failure = [{"role": "user", "content": _UNSTARTED}], None, e
        else:
            failure = None
        self.conversation = Conversation(tokenizer, opening, tools)
        self.executed: list[ToolCall] = []
        # The conversation segment of the reply each environment step read (aligned with
        # `trace().steps`): where a step's reward is placed in the training row.
        self.step_replies: list[int] = []
        # Per reply (its conversation segment): the key of the environment state it was sampled
        # from (`seetjax.envs.state_keys`; None where the environment has none): GiGPO's groups.
        self.reply_states: dict[int, str | None] = {}
        self.turns: list[TurnLog] = [TurnLog(0, state_key([]))]
        self.done = False
        self.truncated = False
        # A branch row (`seetjax.rollout.branching`): a fork whose prefix, the original's, it
        # neither trains nor counts (the turns judged before the fork; `counters()` at the fork).
        self.branch, self.inherited_turns = False, 0
        self.inherited: dict[str, int] = {}
        self.forks = 0  # the fork points this episode branched at (`rollout.branching`)
        self._env_failed = failure is not None  # `trace()` then gives a record without steps
        # An environment that failed to start gave the policy nothing to act on: the episode
        # counts as failed in an evaluation, and training leaves it out (`Rollout.slow_loop`).
        self.unstarted = failure is not None
        if failure is not None:
            self._fault("its reset", failure)
        # A prompt that leaves no room for a reply under max_episode_tokens: the episode ends
        # before any reply, its turns failed, and training leaves it out (`Rollout.slow_loop`).
        self.over_token_cap = self.reply_budget() < 1
        if self.over_token_cap:
            self._truncate()

    @property
    def prompt(self) -> list[int]:
        return self.conversation.segments[0].ids

    @property
    def call_format(self) -> str:
        """How the environment writes calls (anchors render theirs so); python unless it says."""
        return self.env.call_format if isinstance(self.env, ReadsCalls) else "python"

    def reply_budget(self) -> int:
        """Tokens the next reply may have under the reply, turn and episode caps (the episode
        keeps one position for the stop token that closes a reply cut off at its limit)."""
        turn_left = self.limits.max_turn_tokens - self.turns[-1].tokens
        episode_left = self.limits.max_episode_tokens - self.conversation.num_tokens - 1
        return max(0, min(self.limits.max_reply_tokens, turn_left, episode_left))

    def reply(self, completion: Completion) -> list[int] | None:
        """`on_reply` behind the episode's fault boundary: an exception while handling the reply
        (text no check foresaw, a bug, a tool calling exit()) ends this episode as failed,
        logged and counted in `stats()["errors"]`, and the rest of the batch goes on (`FAULTS`;
        the environment's reset and record are behind the same boundary)."""
        try:
            ids = self.on_reply(completion)
        except FAULTS as e:  # one episode must not end the run
            self._fault("its reply handling", e)
            return None
        if ids is None:
            # Over: its record is read once now, so an environment that cannot give it fails
            # the episode before anything is counted or scored.
            self.trace()
        return ids

    def _fault(self, where: str, error: BaseException) -> None:
        logger.warning("episode %s (sample %d) ended by an error in %s", self.task_id,
                       self.sample, where, exc_info=error)
        self.fail(f"{type(error).__name__}: {error}")

    def fail(self, error: str) -> None:
        """Ends the episode as failed at its fault boundary (a reply it could not handle, an
        endpoint that stopped answering): `error` is kept (`stats()["errors"]`; the first, where
        several) and every turn not judged yet fails."""
        self.error = self.error or error[:500]
        self._end_unjudged()

    def on_reply(self, completion: Completion) -> list[int] | None:
        """Handles one sampled reply; returns the ids to append before the next reply, or None
        when the episode is over."""
        log = self.turns[-1]
        log.tokens += len(completion.tokens)
        stopped = completion.finish_reason == "stop"
        first = len(self.conversation.segments)
        self.reply_states[first] = env_state_key(self.env)
        text = self.conversation.add_reply(completion.tokens, completion.logprobs, stopped,
                                           completion.versions)
        parsed = self.env.parse_calls(text) if isinstance(self.env, ReadsCalls) else None

        if (self.stage.interception and isinstance(parsed, list)
                and isinstance(self.env, GroundTruth)
                and log.interceptions < self.stage.interception_budget):
            blocked = intercept(log.accepted, parsed, self.env.expected_calls(),
                                order_free=self.stage.order_free,
                                reveal_arguments=self.stage.reveal_arguments,
                                same_outcome=self.env.same_outcome)
            if blocked is not None:
                log.interceptions += 1
                log.hints += 1
                log.replies.append(StepView(first, tuple(completion.tokens), tuple(parsed),
                                            attempt=True, well_formed=stopped, executed=()))
                feedback = [{"role": "tool", "content": self._feedback("", blocked.hint)}]
                return self._next(feedback, attempt_from=first)

        granted = False
        snapshot = None
        drop = self.stage.training_context == "drop"
        if isinstance(parsed, ParseError):
            granted = self._grant(log)
            result = self._step(text, first, format_error_ends_turn=not granted)
        else:
            # A dropped failure is undone, so the state matches the context (calls unknown
            # before the step, `parsed` None, may fail).
            if (drop and parsed != [] and isinstance(self.env, Rewindable)
                    and log.retries < self.stage.retry_budget):
                snapshot = self.env.snapshot()
            result = self._step(text, first)
            # A step that ended its turn (BFCL's step limit ends the episode) is final, and a
            # dropped attempt whose calls ran is retried only where they can be undone.
            retryable = result.code == StepCode.FORMAT_ERROR or (
                result.code == StepCode.EXECUTION_ERROR and (not drop or snapshot is not None))
            if retryable and not result.turn_ended and not result.done:
                granted = self._grant(log)
        executed: tuple[ToolCall, ...] = ()
        if granted and snapshot is not None:
            self.env.restore(snapshot)  # nothing of the dropped attempt ran
            self.step_replies.pop()
        else:
            executed = self._log_executed(log, result)
        log.replies.append(StepView(first, tuple(completion.tokens), result.calls, granted,
                                    well_formed=stopped and result.code != StepCode.FORMAT_ERROR,
                                    executed=executed))

        observations = list(result.observations)
        if result.code in (StepCode.FORMAT_ERROR, StepCode.EXECUTION_ERROR) and not result.turn_ended:
            hint = (self.env.hint(result) if self.stage.augmented and isinstance(self.env, Hints)
                    else None)
            log.hints += hint is not None
            observations = self._decorate(observations, result, hint)
        if result.verdicts:
            self._judge(result)
        elif log.tokens >= self.limits.max_turn_tokens and not result.done:
            observations += self._end_turn_early(first)
        if result.done or self.done:
            self.done = True
            return None
        return self._next(observations, attempt_from=first if granted else None)

    # ---------------------------------------------------------------- internals

    def _step(self, text: str, reply: int, **kw: Any) -> StepResult:
        """`env.step(text)` for the reply at conversation segment `reply`."""
        result = self.env.step(text, **kw)
        self.step_replies.append(reply)
        return result

    def _grant(self, log: TurnLog) -> bool:
        granted = grant_retry(self.stage, self.progress, log.retries, self.rng)
        log.retries += granted
        return granted

    def _log_executed(self, log: TurnLog, result: StepResult) -> tuple[ToolCall, ...]:
        """Logs the calls of a step that ran (not those rejected before running); returns them."""
        ran = tuple(r.call for r in result.results if r.error not in _NOT_RUN)
        self.executed += ran
        log.accepted += ran
        return ran

    def _decorate(self, observations: list[dict[str, Any]], result: StepResult,
                  hint: str | None) -> list[dict[str, Any]]:
        """Marker and hint on the error messages of a failed step (the last one carries the hint)."""
        failed = [i for i, o in enumerate(observations) if o.get("role") == "tool" and (
            result.code == StepCode.FORMAT_ERROR or not result.results[i].ok)]
        out = [dict(o) for o in observations]
        for n, i in enumerate(failed):
            out[i]["content"] = self._feedback(out[i]["content"], hint if n == len(failed) - 1
                                               else None)
        return out

    def _feedback(self, raw: str, hint: str | None) -> str:
        parts = [self.stage.marker()] if self.stage.feedback_marker else []
        parts += [raw] if raw else []
        parts += [f"Hint: {hint}"] if hint else []
        return " ".join(parts)

    def _judge(self, result: StepResult) -> None:
        logs = {t.turn: t for t in self.turns}
        for verdict in result.verdicts:
            log = logs.get(verdict.turn)
            if log is None:  # a force-terminated episode also judges the turns it never reached
                log = TurnLog(verdict.turn, "")
                self.turns.append(log)
            log.passed, log.checked = verdict.passed, verdict.checked
        if not result.done:
            self.turns.append(TurnLog(result.turn + 1, state_key(self.executed)))

    def _end_turn_early(self, reply: int) -> list[dict[str, Any]]:
        """The turn's token budget is spent: the turn ends as if the model had stopped calling
        (the step is the doing of `reply`, the reply that spent the budget)."""
        result = self._step("", reply)
        self._judge(result)
        self.done = result.done
        return list(result.observations)

    def _next(self, observations: Sequence[Mapping[str, Any]],
              attempt_from: int | None) -> list[int] | None:
        """Appends the observations; a failed attempt (its reply from segment `attempt_from` on,
        and this feedback) is treated as the stage's training_context says."""
        observations = [self._capped(m) for m in observations]
        # The next reply needs room too: stop when it would not have a single token (plus the
        # closing one, should it be cut off there).
        ids = self._append(observations, self.limits.max_episode_tokens - 2)
        # A failed attempt stays one when its feedback no longer fits and the episode ends here.
        if attempt_from is not None:
            self.conversation.exclude(attempt_from, self.stage.training_context)
        if ids is None:
            self._truncate()
            return None
        return ids

    def _append(self, observations: Sequence[Mapping[str, Any]],
                max_tokens: int) -> list[int] | None:
        """Appends the observations; the ids to extend the sampler with, or None when the
        conversation would exceed `max_tokens` (the episode is then truncated)."""
        return self.conversation.add_observations(observations, max_tokens)

    def _capped(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return cap_observation(message, self.tokenizer, self.limits.max_observation_tokens)

    def _truncate(self) -> None:
        """The context is full: the episode ends; turns not judged yet fail."""
        self.truncated = True
        self._end_unjudged()

    def _end_unjudged(self) -> None:
        """Ends the episode; every turn not judged yet fails."""
        self.done = True
        truth = self._truth  # empty where the environment never started the episode
        for log in self.turns:
            if log.passed is None:
                log.passed, log.checked = False, log.turn < len(truth) and bool(truth[log.turn])
        judged = {t.turn for t in self.turns}
        self.turns += [TurnLog(t, "", passed=False, checked=bool(truth[t]))
                       for t in range(len(truth)) if t not in judged]

    # ---------------------------------------------------------------- results

    def trace(self) -> EpisodeTrace:
        """The environment's record of the episode, marked `truncated` when the context filled up
        (the record rewards in `seetjax.rewards` are computed from). Where the environment failed
        to start the episode or to give its record, a record without steps: every turn failed."""
        if not self._env_failed:
            try:
                return dataclasses.replace(self.env.trace(), truncated=self.truncated)
            except FAULTS as e:
                self._env_failed = True
                self._fault("its trace", e)
        return EpisodeTrace(self.task_id, (), (), self._truth, self.truncated)

    def progress_reward(self) -> float:
        """EnvTuning's progress reward, `seetjax.rewards.progress_reward` of `trace()`: passed
        turns / turns of the task (a turn never reached, because the episode was cut short,
        counts as failed)."""
        return progress_reward(self.trace())

    def rewards(self, config: RewardConfig) -> list[tuple[int, float]]:
        """The episode's rewards under `config` (`seetjax.rewards.assigned_rewards`), each with
        the position in the training sequence of the token it goes on: the last generated token
        of the reply its step read, or of the last reply for an episode reward (a reply left out
        of the training sequence, a dropped attempt, passes its reward to the latest reply
        before it that is in)."""
        ends = self.conversation.reply_ends()
        scored = ([(None, self.env_reward()["total"])] if config.kind == "env"
                  else assigned_rewards(self.trace(), config))
        return [(ends[-1 if step is None else self.step_replies[step]], reward)
                for step, reward in scored]

    def turn_starts(self) -> list[int]:
        """The positions in the training sequence where the environment's next user turn
        begins: the token after the reply that ended each turn (horizon 'turn' returns end
        there; see `TrajectoryBatch.turn_starts`). The last turn's may be the sequence's end."""
        ends = self.conversation.reply_ends()
        return sorted({ends[self.step_replies[i]] + 1
                       for i, step in enumerate(self.trace().steps) if step.turn_ended})

    def step_keys(self) -> list[tuple[int, int, str]]:
        """(start, end, state key) of each reply in the training sequence with a key: its
        positions [start, end) and the key of the state it was sampled from."""
        out, position = [], 0
        for index, segment in enumerate(self.conversation.segments):
            if not (segment.in_training and segment.ids):
                continue
            key = self.reply_states.get(index) if segment.kind == "reply" else None
            if key is not None:
                out.append((position, position + len(segment.ids), key))
            position += len(segment.ids)
        return out

    def env_reward(self) -> dict[str, float]:
        """The environment's own reward of the episode, part by part (`ScoresEpisodes`)."""
        if not isinstance(self.env, ScoresEpisodes):
            raise TypeError(f"{type(self.env).__name__} does not score its episodes")
        return self.env.episode_reward(self.truncated)

    def counters(self) -> dict[str, int]:
        """SEET's counters summed over every turn so far, and `policy_tokens`: every token the
        policy sampled (each reply's, retried, intercepted and dropped attempts included: the
        compute spent)."""
        return {"retries": sum(t.retries for t in self.turns),
                "hints": sum(t.hints for t in self.turns),
                "interceptions": sum(t.interceptions for t in self.turns),
                "turns_passed": sum(bool(t.passed) for t in self.turns),
                "policy_tokens": sum(t.tokens for t in self.turns)}

    def stats(self) -> dict[str, int]:
        """`counters()`, a branch's own only (those at its fork, its original's, subtracted), and
        whether the episode was truncated or failed."""
        own = {k: v - self.inherited.get(k, 0) for k, v in self.counters().items()}
        return {**own, "truncated": int(self.truncated), "errors": int(self.error is not None)}
