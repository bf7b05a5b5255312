"""POST /v1/chat/completions: one response, or server-sent events ending with `data: [DONE]`."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from seetjax.serving.chat import Prompt
from seetjax.serving.chat_stream import ContentStream, ForcedCallStream
from seetjax.serving.deps import Server, ServerDep
from seetjax.serving.errors import APIError, error_body
from seetjax.serving.protocol import ChatCompletionRequest
from seetjax.serving.requests import (
    EngineStoppedError,
    ErrorEvent,
    Event,
    GenerationParams,
    QueueFullError,
    RequestDone,
    RequestHandle,
    RequestOutput,
)
from seetjax.serving.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    FunctionCallOut,
    PromptTokensDetails,
    ResponseMessage,
    ToolCallDelta,
    ToolCallOut,
    Usage,
)

router = APIRouter(prefix="/v1", tags=["chat"])

# How often a non-streaming request checks that its client is still there.
_DISCONNECT_POLL_S = 0.5


class Bridge:
    """Engine events (posted from the engine's thread) into this request's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def put(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more


def checked_limit(server: Server, field: str, limit: int | None, prompt_tokens: int, n: int
                  ) -> int:
    """A request's completion-token limit (None: what the context leaves, within the server's
    limit), with it and `n` checked against the server (400s naming the field)."""
    engine, config = server.engine, server.config
    context = engine.max_context
    if limit is not None and limit > config.max_tokens_limit:
        raise APIError(400, f"{field}={limit} is too large: this server allows at most "
                       f"{config.max_tokens_limit} completion tokens.", param=field,
                       code="invalid_value")
    if limit is None:
        limit = min(config.max_tokens_limit, context - prompt_tokens)
    if limit < 1 or prompt_tokens + limit > context:
        raise APIError(400, f"This model's maximum context length is {context} tokens. However, "
                       f"you requested {prompt_tokens + max(limit, 1)} tokens ({prompt_tokens} in "
                       f"the messages, {max(limit, 1)} in the completion). Please reduce the "
                       "length of the messages or completion.", param="messages",
                       code="context_length_exceeded")
    if n > engine.max_batch:
        raise APIError(400, f"n={n} is too large: this server runs at most "
                       f"{engine.max_batch} choices at once.", param="n", code="invalid_value")
    return limit


def generation_params(server: Server, body: ChatCompletionRequest, prompt: Prompt
                      ) -> GenerationParams:
    """The engine's settings for a request, with its limits checked (400s naming the field)."""
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    limit = checked_limit(server, field, body.completion_limit, len(prompt.ids), body.n)
    return GenerationParams(
        max_tokens=limit, temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0, n=body.n,
        stop=tuple(body.stop or ()), seed=body.seed,
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0,
        ignore_eos=body.ignore_eos, constraint=prompt.constraint)


def submit(server: Server, ids: list[int], params: GenerationParams, bridge: Bridge
           ) -> RequestHandle:
    """The request queued in the engine, its events into `bridge` (429 on a full queue)."""
    try:
        return server.engine.submit(ids, params, on_event=bridge.put)
    except QueueFullError as e:
        raise APIError(429, f"The server is busy: {e}. Retry later.", type="requests",
                       code="rate_limit_exceeded",
                       headers={"Retry-After": str(max(1, math.ceil(e.retry_after)))}) from None
    except EngineStoppedError as e:
        raise APIError(503, str(e), type="server_error", code="engine_stopped") from None
    except ValueError as e:  # the engine's own checks (the ones above should catch them first)
        raise APIError(400, str(e), code="invalid_value") from None


@router.post("/chat/completions", response_model=ChatCompletion,
             response_model_exclude_none=True,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "a completion, or SSE chunks with stream=true"}})
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 server: ServerDep):
    server.check_model(body.model)
    prompt = await run_in_threadpool(server.format.prompt, body)
    params = generation_params(server, body, prompt)
    bridge = Bridge()
    handle = submit(server, prompt.ids, params, bridge)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if body.stream:
        return StreamingResponse(_stream(server, body, prompt, handle, bridge, completion_id),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    output = await wait(request, handle, bridge)
    return _completion(server, body, prompt, output, completion_id)


async def wait(request: Request, handle: RequestHandle, bridge: Bridge) -> RequestOutput:
    """The finished output; a client that hangs up cancels the request (its rows are freed)."""
    try:
        while True:
            try:
                event = await asyncio.wait_for(bridge.queue.get(), _DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    raise APIError(499, "client closed the request",
                                   code="client_closed") from None
                continue
            if isinstance(event, RequestDone):
                return event.output
            if isinstance(event, ErrorEvent):
                raise APIError(500, f"Generation failed: {event.message}", type="server_error")
    finally:
        handle.cancel()  # a no-op once finished


def usage_of(output: RequestOutput) -> Usage:
    return Usage(prompt_tokens=output.prompt_tokens, completion_tokens=output.completion_tokens,
                 total_tokens=output.prompt_tokens + output.completion_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=output.cached_tokens))


def _completion(server: Server, body: ChatCompletionRequest, prompt: Prompt,
                output: RequestOutput, completion_id: str) -> ChatCompletion:
    choices = []
    for c in output.choices:
        reply = server.format.reply(body, c.text, c.finish_reason)
        calls = [ToolCallOut(id=t["id"], function=FunctionCallOut(**t["function"]))
                 for t in reply.tool_calls]
        logprobs = (ChoiceLogprobs(content=server.token_text.logprobs(
            c.token_ids, c.logprobs, c.top_logprobs)) if body.logprobs else None)
        choices.append(Choice(
            index=c.index, finish_reason=reply.finish_reason or c.finish_reason,
            message=ResponseMessage(content=reply.content if calls else reply.content or "",
                                    tool_calls=calls or None),
            logprobs=logprobs, token_ids=c.token_ids if body.return_token_ids else None))
    return ChatCompletion(id=completion_id, created=int(time.time()),
                          model=server.config.model_name, choices=choices, usage=usage_of(output),
                          prompt_token_ids=prompt.ids if body.return_token_ids else None)


async def _stream(server: Server, body: ChatCompletionRequest, prompt: Prompt,
                  handle: RequestHandle, bridge: Bridge, completion_id: str
                  ) -> AsyncIterator[str]:
    created, model = int(time.time()), server.config.model_name
    tools_active = server.format.tools_active(body)
    forced = prompt.constraint is not None
    streams = [ContentStream(tools_active, forced) for _ in range(body.n)]
    # A forced call streams its arguments as they decode (its form is known); others go out
    # whole once parsed.
    calls_out = [ForcedCallStream(server.format.call_parts) if forced else None
                 for _ in range(body.n)]
    texts = [""] * body.n

    def sse(choices: list[ChunkChoice], usage: Usage | None = None) -> str:
        chunk = ChatCompletionChunk(id=completion_id, created=created, model=model,
                                    choices=choices, usage=usage)
        return f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"

    try:
        for i in range(body.n):
            yield sse([ChunkChoice(index=i, delta=Delta(role="assistant", content=""))])
        while True:
            event = await bridge.queue.get()
            if isinstance(event, ErrorEvent):
                error = error_body(f"Generation failed: {event.message}", "server_error")
                yield f"data: {json.dumps(error)}\n\n"
                break
            if isinstance(event, RequestDone):
                if body.stream_options is not None and body.stream_options.include_usage:
                    yield sse([], usage_of(event.output))
                break
            i = event.index
            texts[i] += event.text
            content = streams[i].feed(event.text)
            logprobs = (ChoiceLogprobs(content=server.token_text.logprobs(
                event.token_ids, event.logprobs, event.top_logprobs))
                if body.logprobs and event.token_ids else None)
            token_ids = list(event.token_ids) if body.return_token_ids else None
            calls = [] if calls_out[i] is None else [
                ToolCallDelta(**{**d, "function": FunctionCallOut(**d["function"])})
                for d in calls_out[i].feed(event.text)]
            if event.finish_reason is None:
                if content or calls or logprobs or token_ids:
                    yield sse([ChunkChoice(index=i, delta=Delta(content=content or None,
                                                                tool_calls=calls or None),
                                           logprobs=logprobs, token_ids=token_ids)])
                continue
            reply = server.format.reply(body, texts[i], event.finish_reason)
            if calls_out[i] is None:
                content += streams[i].finish(reply.content)
                calls = [ToolCallDelta(index=k, id=t["id"], type="function",
                                       function=FunctionCallOut(**t["function"]))
                         for k, t in enumerate(reply.tool_calls)]
            if content or calls or logprobs or token_ids:
                yield sse([ChunkChoice(index=i, delta=Delta(content=content or None,
                                                            tool_calls=calls or None),
                                       logprobs=logprobs, token_ids=token_ids)])
            yield sse([ChunkChoice(index=i, delta=Delta(),
                                   finish_reason=reply.finish_reason or event.finish_reason)])
        yield "data: [DONE]\n\n"
    finally:
        handle.cancel()  # the client hung up mid-stream: free its rows (a no-op once finished)
