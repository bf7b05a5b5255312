"""POST /v1/completions: OpenAI's legacy text completions, the prompt continued as given (text
or token ids, no chat template)."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request

from seetjax.serving.deps import Server, ServerDep
from seetjax.serving.errors import APIError
from seetjax.serving.protocol import CompletionRequest
from seetjax.serving.requests import ChoiceOutput, GenerationParams
from seetjax.serving.responses import Completion, CompletionChoice, CompletionLogprobs
from seetjax.serving.routes.chat import Bridge, checked_limit, submit, usage_of, wait

router = APIRouter(prefix="/v1", tags=["completions"])


def prompt_ids(server: Server, body: CompletionRequest) -> list[int]:
    """The prompt's token ids (text is encoded as it is; ids are checked against the
    vocabulary)."""
    if isinstance(body.prompt, str):
        ids = server.engine.tokenizer.encode(body.prompt)
        if not ids:
            raise APIError(400, "prompt encodes to no tokens", param="prompt",
                           code="invalid_value")
        return ids
    vocab = server.engine.model.config.vocab_size
    if bad := [t for t in body.prompt if t >= vocab]:
        raise APIError(400, f"prompt holds token ids outside the vocabulary of {vocab}: "
                       f"{bad[:5]}", param="prompt", code="invalid_value")
    return list(body.prompt)


@router.post("/completions", response_model=Completion, response_model_exclude_none=True)
async def create_completion(body: CompletionRequest, request: Request,
                            server: ServerDep) -> Completion:
    server.check_model(body.model)
    ids = prompt_ids(server, body)
    limit = checked_limit(server, "max_tokens", body.max_tokens, len(ids), body.n)
    params = GenerationParams(
        max_tokens=limit, temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0, n=body.n,
        stop=tuple(body.stop or ()), seed=body.seed, top_logprobs=body.logprobs or 0)
    bridge = Bridge()
    output = await wait(request, submit(server, ids, params, bridge), bridge)
    choices = [CompletionChoice(index=c.index, text=c.text, finish_reason=c.finish_reason,
                                logprobs=None if body.logprobs is None
                                else _logprobs(server, c, body.logprobs))
               for c in output.choices]
    return Completion(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()),
                      model=server.config.model_name, choices=choices,
                      usage=usage_of(output))


def _logprobs(server: Server, choice: ChoiceOutput, k: int) -> CompletionLogprobs:
    """Per token of the text (a stop token is not text: it has no entry) its logprob, its top
    `k` alternatives (by text; equal texts keep the likelier) and where it starts in the text."""
    text_of = server.token_text.text
    count = len(choice.token_ids)
    if choice.finish_reason == "stop" and count and choice.token_ids[-1] in server.engine.stop_ids:
        count -= 1
    tokens = [text_of(t) for t in choice.token_ids[:count]]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    tops = None
    if k:
        tops = [{} for _ in tokens]
        for entry, alternatives in zip(tops, choice.top_logprobs[:count]):
            for token_id, logprob in alternatives[:k]:
                entry.setdefault(text_of(token_id), logprob)
    return CompletionLogprobs(tokens=tokens, token_logprobs=choice.logprobs[:count],
                              top_logprobs=tops, text_offset=offsets)
