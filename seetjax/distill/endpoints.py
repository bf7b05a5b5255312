"""One OpenAI-compatible endpoint: the official `openai` client (native tool calling), retries
with exponential backoff and jitter (`tenacity`) on 429 / 5xx / timeouts / lost connections /
malformed replies (`seetjax.distill.replies`), at least as long as a `Retry-After` asks, and usage
counted for budgets.

The client's own retry loop is off (`max_retries=0`): tenacity decides, so every attempt is
counted and the wait honours the pool's settings. Errors that retrying cannot fix (400, 401, 403,
404, 422) fail at once, and the pool falls back to its next endpoint. Each attempt has the
endpoint's `timeout_s` in all, from sending the request to the last byte of the reply: the
client's own timeout only bounds each read, which a reply trickling in never trips.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from seetjax.distill.config import EndpointSpec, Retries
from seetjax.distill.replies import MalformedReply, Message, parse_reply

logger = logging.getLogger(__name__)
RETRY_STATUSES = (408, 409, 429)
# Names the scenario a request belongs to (providers ignore unknown headers; the oracle teacher
# finds its ground truth by it).
SCENARIO_HEADER = "X-Seetjax-Scenario"


class EndpointFailed(Exception):
    """An endpoint gave no usable reply: retries spent, or an error retrying cannot fix."""

    def __init__(self, endpoint: str, cause: BaseException, attempts: int):
        super().__init__(f"endpoint {endpoint!r} failed after {attempts} attempt(s): "
                         f"{type(cause).__name__}: {cause}")
        self.endpoint, self.cause, self.attempts = endpoint, cause, attempts


class BudgetSpent(Exception):
    """A request was refused before it was sent: an endpoint's or the run's budget is spent."""


class DeadlineExceeded(Exception):
    """A reply not whole within the endpoint's `timeout_s`: retried."""


class PreflightError(RuntimeError):
    """An endpoint cannot serve the run (unreachable, key refused, model not served)."""


def retryable(error: BaseException) -> bool:
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, MalformedReply,
                          DeadlineExceeded)):
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRY_STATUSES or error.status_code >= 500
    return False


def retry_after_s(error: BaseException | None) -> float:
    """Seconds an error's `Retry-After` header asks for (0 without one)."""
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(float(value), 0.0) if value is not None else 0.0
    except ValueError:  # an HTTP date: not worth parsing for a local pool
        return 0.0


@dataclasses.dataclass
class Usage:
    """Requests and tokens one endpoint has used (all attempts count as requests)."""

    requests: int = 0
    failures: int = 0  # attempts that raised
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclasses.dataclass(frozen=True)
class Reply:
    """One chat completion: the message, why it ended, who answered and its token counts."""

    message: Message
    finish_reason: str | None
    endpoint: EndpointSpec
    prompt_tokens: int
    completion_tokens: int


class Endpoint:
    """A client of one endpoint, with retries and a usage count (see the module docstring).

    `budget` is the run-wide budget the pool shares; it and the endpoint's own limits are checked
    before each request (a request in flight may overshoot by its own tokens). `usage` counts
    this invocation; `used_before` what earlier invocations of the run used, which the endpoint's
    limits count too."""

    def __init__(self, spec: EndpointSpec, retries: Retries, budget: RunBudget,
                 used_before: Usage | None = None):
        self.spec, self.retries, self.budget = spec, retries, budget
        self.usage, self.used_before = Usage(), used_before or Usage()
        self.client = openai.AsyncOpenAI(base_url=spec.base_url, api_key=spec.api_key(),
                                         max_retries=0, timeout=spec.timeout_s)

    @property
    def name(self) -> str:
        return self.spec.name

    def spent(self) -> bool:
        limits, before = self.spec, self.used_before
        return bool(limits.max_requests
                    and self.usage.requests + before.requests >= limits.max_requests
                    or limits.max_tokens and self.usage.tokens + before.tokens >= limits.max_tokens)

    async def chat(self, messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] | None = None,
                   headers: Mapping[str, str] | None = None, **overrides: Any) -> Reply:
        """A completion, retried as the module docstring says; raises EndpointFailed or
        BudgetSpent. `headers` go with the request (e.g. `SCENARIO_HEADER`); `overrides`
        replace sampling parameters (e.g. `tool_choice="none"`)."""
        sampling = self.spec.sampling
        kwargs: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                  "max_tokens": sampling.max_tokens}
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if tools:
            kwargs["tools"] = list(tools)
        kwargs.update(overrides)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retries.max_attempts),
            wait=self._wait, retry=retry_if_exception(retryable), reraise=True,
            before_sleep=self._count_retry)
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    return await self._once(list(messages), kwargs, headers or {})
        except BudgetSpent:
            raise
        except Exception as e:  # noqa: BLE001 - every failure becomes the pool's fallback signal
            raise EndpointFailed(self.name, e, attempts) from e
        raise AssertionError("unreachable: tenacity reraises")

    async def _once(self, messages: list[dict[str, Any]], kwargs: dict[str, Any],
                    headers: Mapping[str, str]) -> Reply:
        if self.spent() or self.budget.spent():
            raise BudgetSpent(f"endpoint {self.name!r}: budget spent")
        self.usage.requests += 1
        self.budget.add(requests=1)
        try:
            # The client's generic `post` (its documented way to send a body as it is) instead
            # of `chat.completions.create`, whose recursive TypedDict transform of messages and
            # tool schemas costs ~14 ms of CPU per request here, the pipeline's largest cost
            # against a fast endpoint. Same transport, errors and timeouts; the body comes back
            # as bytes for `parse_reply`, which checks all of it.
            try:
                async with asyncio.timeout(self.spec.timeout_s):
                    body = await self.client.post(
                        "/chat/completions", cast_to=bytes,
                        body={"model": self.spec.model, "messages": messages, **kwargs},
                        options={"headers": dict(headers)})
            except TimeoutError:
                raise DeadlineExceeded(f"no whole reply within timeout_s="
                                       f"{self.spec.timeout_s:g} s") from None
            reply = parse_reply(body)
        except Exception:
            self.usage.failures += 1
            raise
        prompt, completion = reply.tokens
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        self.budget.add(tokens=prompt + completion)
        return Reply(reply.message, reply.finish_reason, self.spec, prompt, completion)

    def _wait(self, state: RetryCallState) -> float:
        r = self.retries
        backoff = wait_exponential_jitter(multiplier=r.initial_s, max=r.max_s, jitter=r.jitter_s)
        error = state.outcome.exception() if state.outcome else None
        return max(backoff(state), retry_after_s(error))

    def _count_retry(self, state: RetryCallState) -> None:
        self.usage.retries += 1
        error = state.outcome.exception() if state.outcome else None
        logger.info("endpoint %s: retry %d after %s: %s", self.name, state.attempt_number,
                    type(error).__name__, error)

    async def preflight(self) -> None:
        """Lists the endpoint's models: raises PreflightError naming the endpoint when it is
        unreachable, refuses the key, or does not serve the configured model."""
        where = f"endpoint {self.name!r} ({self.spec.base_url})"
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                listed = await self.client.models.list()
        except TimeoutError:
            raise PreflightError(f"{where}: no whole answer to GET /models within timeout_s="
                                 f"{self.spec.timeout_s:g} s") from None
        except openai.AuthenticationError as e:
            key = (f"the key in ${self.spec.api_key_env}" if self.spec.api_key_env
                   else "no key (set api_key_env)")
            raise PreflightError(f"{where}: {key} was refused (401): {e}") from None
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise PreflightError(f"{where} is unreachable: {e}") from None
        except openai.APIStatusError as e:
            if e.status_code == 404:  # some servers have no /models: nothing to check
                return
            raise PreflightError(f"{where}: GET /models answered {e.status_code}: {e}") from None
        served = [m.id for m in listed.data]
        if served and self.spec.model not in served:
            raise PreflightError(f"{where} serves {served}, not model {self.spec.model!r}")

    async def close(self) -> None:
        await self.client.close()


class RunBudget:
    """Requests and tokens over every endpoint of the run (0: unlimited). Counted on the event
    loop's thread only, so plain integers."""

    def __init__(self, max_requests: int = 0, max_tokens: int = 0):
        self.max_requests, self.max_tokens = max_requests, max_tokens
        self.requests = self.tokens = 0

    def add(self, requests: int = 0, tokens: int = 0) -> None:
        self.requests += requests
        self.tokens += tokens

    def spent(self) -> bool:
        return bool(self.max_requests and self.requests >= self.max_requests
                    or self.max_tokens and self.tokens >= self.max_tokens)
