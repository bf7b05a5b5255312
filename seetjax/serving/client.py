"""BFCL episodes through any OpenAI-compatible endpoint (vLLM, SGLang, a hosted API, or
`launch/serve.py`), scored by our executor and checker into the same report as a local model.

Each episode is played by one worker: the conversation so far goes out as chat messages, the
reply comes back as text and goes to the episode exactly as a sampled reply would (the episode's
tokenizer only counts tokens for its limits). Two ways of talking to the endpoint:

- native function calling (prompt_style "native"): the tools go in `tools`; assistant calls go
  back as `tool_calls` with ids and each result as a `tool` message with its `tool_call_id`;
  returned `tool_calls` become the `<tool_call>` text the environment reads.
- BFCL's prompt styles ("bfcl", "compact"): the tools are in the system prompt, calls are plain
  text; tool results go as `tool` messages (our server and vLLM take them without ids) or, with
  `tool_messages="user"`, as user messages, for APIs that refuse a tool message without a call.

Retries with exponential backoff on 429 (honouring Retry-After), 5xx and lost connections are
the `openai` client's own (`max_retries`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.envs.bfcl.data import BfclTask
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn import SingleTurnTask
from seetjax.errors import invalid, require
from seetjax.eval.evaluate import EVAL_STAGE, SplitReport, reads_the_same, report
from seetjax.eval.single_turn_eval import prompts
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import Conversation
from seetjax.rollout.episode import Episode, EpisodeLimits
from seetjax.rollout.loop import Rollout
from seetjax.sampling import Completion
from seetjax.serving.chat import outside_calls
from seetjax.tools.calls import ParseError, parse_tool_calls

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    """url: the API base (`http://127.0.0.1:8000/v1`); model: the id the endpoint serves;
    temperature 0 is greedy; seed is sent (endpoints that honour it repeat themselves);
    tool_messages: how prompt-style episodes send tool results ("tool" or "user")."""

    url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.0
    seed: int | None = 0
    concurrency: int = 8
    max_retries: int = 8
    timeout_s: float = 600.0
    tool_messages: str = "tool"

    def __post_init__(self):
        if not self.url.startswith(("http://", "https://")):
            raise invalid(self, "url", self.url, "must be an http(s):// URL")
        if not self.model:
            raise invalid(self, "model", self.model, "must name the endpoint's model")
        for name, least in (("concurrency", 1), ("max_retries", 0), ("temperature", 0)):
            require(getattr(self, name) >= least, self, name, getattr(self, name),
                    f"must be >= {least}")
        if self.tool_messages not in ("tool", "user"):
            raise invalid(self, "tool_messages", self.tool_messages, "one of 'tool', 'user'")


class EndpointPolicy:
    """Plays episodes to their end through an endpoint, `concurrency` episodes at a time."""

    def __init__(self, config: EndpointConfig, tokenizer: Tokenizer):
        import openai

        self.config, self.tokenizer = config, tokenizer
        # The client's own retry loop: exponential backoff with jitter on 408/409/429/5xx and
        # connection errors, honouring Retry-After.
        self.client = openai.OpenAI(base_url=config.url, api_key=config.api_key or "EMPTY",
                                    max_retries=config.max_retries, timeout=config.timeout_s)
        self.requests = 0
        self.failed_episodes = 0  # ended by an endpoint error (retries spent)

    def play(self, episodes: Sequence[Episode]) -> None:
        """Every episode to its end. An endpoint error ends that episode (logged, counted in its
        stats as an error), as a bug in reply handling does; the others go on."""
        with concurrent.futures.ThreadPoolExecutor(self.config.concurrency) as pool:
            list(pool.map(self._play_one, episodes))

    def _play_one(self, episode: Episode) -> None:
        while not episode.done:
            try:
                completion = self.reply(episode)
            except Exception as e:  # noqa: BLE001 - retries spent: this episode fails, not all
                episode.fail(f"endpoint: {type(e).__name__}: {e}")
                logger.warning("episode %s: %s", episode.task.id, episode.error)
                self.failed_episodes += 1
                return
            if episode.reply(completion) is None:
                return

    def reply(self, episode: Episode) -> Completion:
        """The endpoint's next reply in the episode, as the completion the episode reads."""
        return self.complete(episode.conversation, episode.reply_budget(), episode.call_format)

    def complete(self, conversation: Conversation, budget: int, call_format: str) -> Completion:
        """The endpoint's next reply to `conversation` (at most `budget` tokens; its calls
        written in `call_format`), as the completion a sampler would give."""
        if budget < 1:
            return Completion([], [], "length")
        native = conversation.tools is not None
        kwargs: dict[str, Any] = {}
        if native:
            kwargs["tools"] = conversation.tools
        if self.config.seed is not None:
            kwargs["seed"] = self.config.seed
        self.requests += 1
        response = self.client.chat.completions.create(
            model=self.config.model, max_tokens=budget, temperature=self.config.temperature,
            messages=self.messages(conversation.messages, native, call_format), **kwargs)
        choice = response.choices[0]
        text = reply_text(choice.message.content, choice.message.tool_calls or [])
        ids = self.tokenizer.encode(text)
        if choice.finish_reason == "length":
            return Completion(ids, [0.0] * len(ids), "length")
        ids.append(self.tokenizer.reply_end_id)
        return Completion(ids, [0.0] * len(ids), "stop")

    def messages(self, history: Sequence[Mapping[str, Any]], native: bool,
                 call_format: str) -> list[dict[str, Any]]:
        """The episode's messages in the endpoint's terms (see `chat_messages`)."""
        return chat_messages(history, native, call_format, self.config.tool_messages)


def chat_messages(history: Sequence[Mapping[str, Any]], native: bool, call_format: str,
                  tool_messages: str = "tool") -> list[dict[str, Any]]:
    """An episode's messages in an endpoint's terms (see the module docstring): with `native`,
    calls written in assistant text become `tool_calls` with ids `call_<message>_<k>` and each
    result a `tool` message answering one; `tool_messages="user"` says prompt-style results as
    the user."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant calls not answered yet
    for n, message in enumerate(history):
        role, content = message["role"], message.get("content") or ""
        if role == "assistant":
            pending = []
            calls = parse_tool_calls(content, call_format) if native else []
            if native and not isinstance(calls, ParseError) and calls:
                ids = [f"call_{n}_{k}" for k in range(len(calls))]
                outside = outside_calls(content).strip()
                out.append({"role": "assistant", "content": outside or None,
                            "tool_calls": [
                                {"id": i, "type": "function",
                                 "function": {"name": c.name,
                                              "arguments": json.dumps(dict(c.args),
                                                                      ensure_ascii=False)}}
                                for i, c in zip(ids, calls)]})
                pending = ids
            else:
                out.append({"role": "assistant", "content": content})
        elif role == "tool":
            if native and pending:
                out.append({"role": "tool", "tool_call_id": pending.pop(0), "content": content})
            elif native or tool_messages == "user":
                # No call to answer (an error about the message itself), or an API that refuses
                # tool messages without ids: said as the user.
                out.append({"role": "user", "content": content})
            else:
                out.append({k: v for k, v in message.items() if k in ("role", "content", "name")})
        else:
            out.append({"role": role, "content": content})
    return out


def reply_text(content: str | None, tool_calls: Sequence[Any]) -> str:
    """An endpoint's reply as the text the environment reads: the content, then each tool call
    as a `<tool_call>` block (its arguments as sent, so malformed ones stay a format error)."""
    blocks = [f'<tool_call>{{"name": {json.dumps(c.function.name)}, "arguments": '
              f'{c.function.arguments or "{}"}}}</tool_call>' for c in tool_calls]
    return "\n".join(([content] if content else []) + blocks)


def evaluate_endpoint(rollouts: Mapping[str, Rollout], policy: EndpointPolicy,
                      tasks: Sequence[BfclTask], split: str, labels: Mapping[str, str],
                      greedy: bool) -> list[SplitReport]:
    """One report per decoding (`rollouts` in order, keyed by decoding; `labels` their row
    names). Greedy, episodes of the first decoding that read the same under another are reused
    (as `seetjax.eval.evaluate.redecode`); the others are played again."""
    decodings = list(rollouts)
    first = rollouts[decodings[0]]
    played = first.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
    policy.play(played)
    reports = [report(labels[decodings[0]], played)]
    for decoding in decodings[1:]:
        rollout = rollouts[decoding]
        again = list(range(len(played))) if not greedy else [
            i for i, e in enumerate(played) if not reads_the_same(e, rollout.config.env)]
        replayed = rollout.episodes([played[i].task for i in again], EVAL_STAGE, progress=1.0,
                                    seed=0)
        policy.play(replayed)
        merged = list(played)
        for i, episode in zip(again, replayed):
            merged[i] = episode
        reports.append(report(labels[decoding], merged))
    return reports


def single_turn_replies(policy: EndpointPolicy, tasks: Sequence[SingleTurnTask],
                        tokenizer: Tokenizer, config: BfclEnvConfig,
                        limits: EpisodeLimits) -> list[str | None]:
    """The endpoint's reply to each BFCL single-turn task's prompt in `config`'s style,
    `concurrency` at a time; None where the prompt leaves no room for one or the endpoint failed
    (retries spent: logged, counted in `failed_episodes`, the task fails)."""

    def one(task: SingleTurnTask, prepared: tuple[Conversation, int]) -> str | None:
        conversation, budget = prepared
        if budget < 1:
            return None
        try:
            completion = policy.complete(conversation, budget, config.resolved_call_format)
        except Exception as e:  # noqa: BLE001 - retries spent: this task fails, not all
            logger.warning("task %s: endpoint: %s: %s", task.id, type(e).__name__, e)
            policy.failed_episodes += 1
            return None
        return conversation.add_reply(completion.tokens, completion.logprobs,
                                      completion.finish_reason == "stop")

    with concurrent.futures.ThreadPoolExecutor(policy.config.concurrency) as pool:
        return list(pool.map(one, tasks, prompts(tasks, tokenizer, config, limits)))


class EndpointUnusable(RuntimeError):
    """The endpoint cannot be reached, or refused a first request."""


def check_endpoint(policy: EndpointPolicy, api_key_env: str) -> None:
    """An endpoint evaluation's first request, so that an endpoint that cannot be reached or
    refuses us (a wrong API key, an unknown model) fails the evaluation before any work, named,
    instead of every episode failing into a 0% report: one 1-token request with `policy`'s
    client (its retries included); raises EndpointUnusable naming the endpoint, the model and
    what went wrong (`api_key_env`: where the key was read, named when it was refused)."""
    import openai

    config = policy.config
    try:
        policy.client.chat.completions.create(
            model=config.model, max_tokens=1,
            messages=[{"role": "user", "content": "Reply with one word."}])
    except openai.APIStatusError as e:
        key = (f"; check --api_key_env={api_key_env} (the variable is "
               f"{'set' if os.environ.get(api_key_env) else 'unset'})"
               if e.status_code in (401, 403) else "")
        raise EndpointUnusable(f"--endpoint={config.url} (--model={config.model}) refused a "
                               f"first request: HTTP {e.status_code}: {e.message}{key}") from None
    except openai.APIConnectionError as e:
        raise EndpointUnusable(f"--endpoint={config.url}: cannot connect ({e}; after "
                               f"{config.max_retries} retries)") from None
