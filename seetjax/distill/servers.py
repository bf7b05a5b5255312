"""Local OpenAI-compatible endpoints for offline distillation, tests and benchmarks.

- The **oracle** answers scenarios with ground truth from that ground truth: in each user turn it
  first makes the turn's calls (one reply, parallel `tool_calls`), then, after the results, an
  English final answer (with a Chinese summary line when the system prompt asks for one); a turn
  whose ground truth is empty gets a request for the missing information. It finds the scenario
  by the id each request carries in its `X-Seetjax-Scenario` header (`SCENARIO_HEADER`, sent by
  the episode and the reviewer), never by the conversation, which two scenarios may share;
  asked to reflect on its answer, it repeats it. It also answers review requests
  (`seetjax.distill.review`) with a verdict from `review_policy`, counting reviews per scenario.
- The **fault** endpoint serves a handler (the oracle's) but answers request n with the fault
  `faults[n % len(faults)]`: `429` (with Retry-After), `500`, `timeout` (sleeps past the
  client's timeout, then answers), `malformed` (a 200 whose body is not JSON), `truncated` (a 200
  whose JSON body stops halfway, as a dropped connection leaves it), `trickle` (the answer one
  byte every `trickle_s`: each read is quick, the whole reply is not), a function (the handler's
  answer -> the body sent: any JSON value, or bytes sent as they are; to fuzz reply shapes) or
  None (a normal answer).

Both are FastAPI apps speaking the chat-completions schema, served by uvicorn like
`launch/serve.py`; the oracle makes validated data with no model at all.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from seetjax.distill.endpoints import SCENARIO_HEADER
from seetjax.distill.episode import REFLECTION_PROMPT
from seetjax.distill.review import REVIEW_MARKER
from seetjax.distill.scenarios import Scenario
from seetjax.errors import invalid

# (request body, request headers) -> response body
Handler = Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]
# (transcript, times this scenario was reviewed before) -> verdict fields
ReviewPolicy = Callable[[str, int], dict[str, Any]]
FAULTS = ("429", "500", "timeout", "malformed", "truncated", "trickle")
# A named fault, a function rewriting the answer (see the module docstring), or None.
Fault = str | Callable[[dict[str, Any]], Any] | None
ORACLE_SUMMARY = "已完成：{names}。"
ORACLE_ASK_SUMMARY = "需要更多信息才能继续。"
# The oracle's sentences: English, or Chinese (to exercise the language policy).
NARRATIVES = {
    "en": {"calls": "I will run the calls this request needs.",
           "done": "I have completed your request using {names}; the results are shown above.",
           "ask": "I cannot complete this request yet: a required detail or tool is missing, "
                  "so please provide it."},
    "zh": {"calls": "我将调用完成这个请求所需要的工具。",
           "done": "我已经使用{names}完成了你的请求，结果如上所示。",
           "ask": "我现在还不能完成这个请求：缺少必要的信息或工具，请提供。"},
}


def accept_all(transcript: str, seen: int) -> dict[str, Any]:
    return {"score": 0.95, "needs_revision": False, "feedback": "",
            "chinese_summary": "对话正确完成了用户的请求。"}


def completion(model: str, content: str | None, tool_calls: Sequence[dict[str, Any]] = (),
               prompt_tokens: int = 0) -> dict[str, Any]:
    """A chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    completion_tokens = len((content or "").split()) + sum(
        len(c["function"]["arguments"].split()) for c in tool_calls)
    return {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class Oracle:
    """The oracle's answers (see the module docstring); a plain (request, headers) -> response
    function."""

    def __init__(self, scenarios: Iterable[Scenario], model: str = "oracle",
                 summary_marker: str = "中文摘要：", review_policy: ReviewPolicy = accept_all,
                 narrative: str = "en"):
        if narrative not in NARRATIVES:
            raise invalid(self, "narrative", narrative, f"one of {tuple(NARRATIVES)}")
        self.model, self.marker, self.review_policy = model, summary_marker, review_policy
        self.texts = NARRATIVES[narrative]
        self.by_id = {scenario.id: scenario for scenario in scenarios}
        self.reviews: collections.Counter[str] = collections.Counter()

    def __call__(self, request: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        messages = request.get("messages") or []
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        system = next((m.get("content") or "" for m in messages if m["role"] == "system"), "")
        scenario_id = headers.get(SCENARIO_HEADER, "")
        if system.startswith(REVIEW_MARKER):
            return self._review(messages, scenario_id, prompt_tokens)
        if messages and messages[-1].get("content") == REFLECTION_PROMPT:  # its answer stands
            return completion(self.model, messages[-2].get("content"), (), prompt_tokens)
        scenario = self.by_id.get(scenario_id)
        if scenario is None:
            return completion(self.model, "I do not know this task.", (), prompt_tokens)
        turn, steps = -1, 0
        previous = None
        for m in messages:
            if m["role"] == "user" and previous != "user":
                turn, steps = turn + 1, 0
            elif m["role"] == "assistant":
                steps += 1
            previous = m["role"]
        calls = scenario.task.ground_truth[turn] if 0 <= turn < scenario.task.num_turns else ()
        if calls and steps == 0:
            return completion(self.model, self.texts["calls"], [
                {"id": f"call_{turn}_{k}", "type": "function",
                 "function": {"name": c.name,
                              "arguments": json.dumps(dict(c.args), ensure_ascii=False)}}
                for k, c in enumerate(calls)], prompt_tokens)
        if calls:
            names = ", ".join(dict.fromkeys(c.name for c in calls))
            answer = self.texts["done"].format(names=names)
            summary = ORACLE_SUMMARY.format(names="、".join(dict.fromkeys(c.name for c in calls)))
        else:
            answer = self.texts["ask"]
            summary = ORACLE_ASK_SUMMARY
        if self.marker and self.marker in system:
            answer += f"\n{self.marker}{summary}"
        return completion(self.model, answer, (), prompt_tokens)

    def _review(self, messages: list[dict[str, Any]], scenario_id: str, prompt_tokens: int
                ) -> dict[str, Any]:
        transcript = messages[-1].get("content") or ""
        verdict = self.review_policy(transcript, self.reviews[scenario_id])
        self.reviews[scenario_id] += 1
        return completion(self.model, json.dumps(verdict, ensure_ascii=False), (), prompt_tokens)


def _models(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "seetjax"}]}


def oracle_app(oracle: Oracle, latency_s: float = 0.0) -> FastAPI:
    """The oracle over HTTP: `GET /v1/models`, `POST /v1/chat/completions`; each answer after
    `latency_s` (a model's think time, for benchmarks of the I/O-bound pipeline)."""
    app = FastAPI(title="seetjax distillation oracle")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return _models(oracle.model)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        if latency_s:
            await asyncio.sleep(latency_s)
        return oracle(body, request.headers)

    return app


def fault_app(handler: Handler, faults: Sequence[Fault], model: str = "oracle",
              timeout_sleep_s: float = 2.0, retry_after_s: float = 0.05, trickle_s: float = 1.0,
              counts: collections.Counter[str] | None = None) -> FastAPI:
    """`handler` behind injected faults (see the module docstring); `counts` tallies the
    answers by fault ("ok" for none, a function's name for a function)."""
    unknown = {f for f in faults if isinstance(f, str)} - set(FAULTS)
    if not faults or unknown:
        raise invalid("fault_app", "faults", faults, f"a non-empty list of {FAULTS}, functions "
                      f"or None; unknown: {sorted(unknown)}")
    schedule = itertools.cycle(faults)
    counts = collections.Counter() if counts is None else counts
    app = FastAPI(title="seetjax fault-injecting endpoint")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return _models(model)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        fault = next(schedule)
        counts[getattr(fault, "__name__", fault) or "ok"] += 1
        if fault == "429":
            return JSONResponse({"error": {"message": "rate limited", "type": "rate_limit",
                                           "param": None, "code": "rate_limited"}},
                                status_code=429, headers={"Retry-After": f"{retry_after_s:g}"})
        if fault == "500":
            return JSONResponse({"error": {"message": "injected failure", "type": "server_error",
                                           "param": None, "code": None}}, status_code=500)
        if fault == "timeout":
            await asyncio.sleep(timeout_sleep_s)
        answer = handler(body, request.headers)
        if callable(fault):
            answer = fault(answer)
            if isinstance(answer, bytes):
                return Response(answer, media_type="application/json")
        text = json.dumps(answer, ensure_ascii=False)
        if fault == "malformed":
            text = "<html>502 Bad Gateway</html>"
        elif fault == "truncated":
            text = text[:len(text) // 2]
        elif fault == "trickle":
            return StreamingResponse(_trickle(text.encode(), trickle_s),
                                     media_type="application/json")
        return Response(text, media_type="application/json")

    return app


async def _trickle(data: bytes, seconds_per_byte: float) -> AsyncIterator[bytes]:
    for i in range(len(data)):
        yield data[i:i + 1]
        await asyncio.sleep(seconds_per_byte)


def review_script(verdicts: Mapping[int, dict[str, Any]]) -> ReviewPolicy:
    """A review policy answering the k-th review of a scenario with `verdicts[k]` (the last one
    for later reviews): e.g. `{0: low score with feedback, 1: accepted}` for refinement rounds."""
    last = max(verdicts)
    return lambda transcript, seen: verdicts[min(seen, last)]
