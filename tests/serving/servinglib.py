"""Test helpers: a live uvicorn server on 127.0.0.1, and the embedded default taught one tool
dialog (so real tool calls come out of a real model through the real server)."""

import hashlib
import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

MODEL_NAME = "seetjax-tiny"
# Short on purpose: every token of the prompt is trained through.
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
TOOLS = [WEATHER_TOOL]
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
OBSERVATION = "sunny, 21 C"
ANSWER = "It is sunny in Paris."


def tool_dialog() -> list[dict]:
    """The dialog the test model learns: a call, its result, the answer."""
    return [QUESTION,
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function", "function": CALL}]},
            {"role": "tool", "tool_call_id": "call_1", "content": OBSERVATION},
            {"role": "assistant", "content": ANSWER}]


TEACH_STEPS, TEACH_LR, TEACH_LOSS = 400, 3e-3, 0.02


def teach_tool_dialog(model, tokenizer, steps: int = TEACH_STEPS, lr: float = TEACH_LR) -> None:
    """Fits `model` (in place) to `tool_dialog()` rendered with TOOLS, with the loss on the
    assistant replies only (logits computed only there: the vocabulary projection is most of
    the work), until the loss is below TEACH_LOSS (90-150 steps for the embedded default)."""
    encoded = tokenizer.encode_messages(tool_dialog(), TOOLS)
    ids = np.asarray(encoded.ids)
    targets = np.flatnonzero(np.asarray(encoded.loss_mask)[1:])  # predict ids[t + 1] from t
    tokens = jnp.asarray(ids[None, :-1])
    labels = jnp.asarray(ids[None, targets + 1])
    positions = jnp.arange(tokens.shape[1])[None]
    segments = jnp.ones_like(tokens)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adam(lr)
    opt_state = optimizer.init(params)

    def loss_fn(p):
        m = nnx.merge(graphdef, p, rest)
        hidden, _ = m.hidden_states(tokens, positions, segments)
        logits = m.logits(hidden[:, targets])
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    @jax.jit
    def step(p, s):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    for i in range(1, steps + 1):
        params, opt_state, loss = step(params, opt_state)
        if i % 10 == 0 and float(loss) < TEACH_LOSS:
            break
    if float(loss) >= TEACH_LOSS:
        raise RuntimeError(f"the test model did not learn its dialog (loss {float(loss):.3f})")
    nnx.update(model, params)


def taught_model_dir(embedded_dir) -> Path:
    """The embedded default taught `tool_dialog()`, built once per machine (like the embedded
    default itself) under the seetjax cache: later runs only load it."""
    from seetjax.models.hf import load_hf_checkpoint, save_hf_checkpoint
    from seetjax.models.tokenizer import Tokenizer
    from seetjax.runtime.cache import cache_root

    recipe = json.dumps([str(embedded_dir), tool_dialog(), TOOLS, TEACH_STEPS, TEACH_LR,
                         TEACH_LOSS], sort_keys=True)
    out = cache_root() / "test_models" / hashlib.sha256(recipe.encode()).hexdigest()[:16]
    if not (out / "config.json").exists():
        tokenizer = Tokenizer.from_pretrained(embedded_dir)
        model = load_hf_checkpoint(embedded_dir)
        teach_tool_dialog(model, tokenizer)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        save_hf_checkpoint(model, tmp, tokenizer=tokenizer)
        try:
            tmp.rename(out)  # atomic: a concurrent builder's copy is as good
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


class LiveServer:
    """uvicorn serving `app` in a thread as `launch/serve.py` serves it (`uvicorn_config`, with
    `bounds` such as idle_timeout_s), on a socket bound here to a free port of 127.0.0.1."""

    def __init__(self, app, **bounds):
        import uvicorn

        from seetjax.serving.connections import uvicorn_config

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1"
        self.server = uvicorn.Server(uvicorn_config(app, log_level="warning", **bounds))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def sse_events(response) -> list[str]:
    """The `data:` payloads of a server-sent-events response, in order."""
    return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


def json_or_text(payload: str):
    return payload if payload == "[DONE]" else json.loads(payload)


def greedy_alone(sampler, params, prompt, max_tokens, stop_ids):
    """The sampler on one prompt by itself, greedy: the reference for token identity."""
    from seetjax.sampling import SamplingParams
    seqs = sampler.prefill(params, [prompt])
    _, (completion,) = sampler.generate(params, seqs, jax.random.key(0), max_tokens, stop_ids,
                                        SamplingParams(temperature=0.0))
    return completion


def np_close(a, b, atol=1e-4) -> bool:
    return len(a) == len(b) and bool(np.allclose(a, b, atol=atol))
