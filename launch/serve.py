"""An OpenAI-compatible chat-completions server for a seetjax policy (or any HF directory).

    python launch/serve.py                                      # the embedded default, 127.0.0.1:8000
    python launch/serve.py --model=runs/tiny/model --port=8001 --max_batch=16
    SEETJAX_API_KEY=secret python launch/serve.py --model=/models/Qwen2.5-7B-Instruct \
        --dtype=bfloat16 --host=0.0.0.0

Then any OpenAI client: `OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="secret")`.
Continuous batching over the jitted sampler (`seetjax/serving/engine.py`); FastAPI + uvicorn.
"""

import os
from pathlib import Path

from absl import app, flags, logging

from seetjax.serving.connections import DRAIN_TIMEOUT_S, IDLE_TIMEOUT_S

_MODEL = flags.DEFINE_string(
    "model", "", "HF directory; '' = the embedded default, 'embedded:base' its pretrained base.")
_NAME = flags.DEFINE_string("served_model_name", "",
                            "The model id clients send ('' = the directory's name).")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 8, "Cache rows decoding at once (choices).")
_MAX_QUEUE = flags.DEFINE_integer("max_queue", 64,
                                  "Requests waiting for rows; more get 429 with Retry-After.")
_CHUNK = flags.DEFINE_integer("chunk_steps", 16,
                              "Decode steps between admissions (requests join and leave then).")
_MAX_CONTEXT = flags.DEFINE_integer("max_context", 0,
                                    "Prompt + completion tokens (0 = the model's maximum).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens_limit", 4096,
                                   "The most completion tokens one choice may ask for.")
_PREFIX = flags.DEFINE_integer("prefix_cache_tokens", 32768,
                               "Cached slots kept for prefix reuse (0 = off).")
_BATCHING = flags.DEFINE_enum("batching", "continuous", ["continuous", "static"],
                              "continuous: join between chunks; static: only when all rows free.")
_DTYPE = flags.DEFINE_string("dtype", "float32", "Parameter and compute dtype.")
_API_KEY = flags.DEFINE_string(
    "api_key", None, "Bearer token clients must send (default: $SEETJAX_API_KEY; unset = open). "
    "Prefer the variable: flags show in process listings.")
_MAX_BYTES = flags.DEFINE_integer("max_request_bytes", 4 << 20, "Larger request bodies get 413.")
_IDLE = flags.DEFINE_float(
    "idle_timeout_s", IDLE_TIMEOUT_S, "A connection that sends no complete request within this "
    "many seconds (of opening, or of its last response) is closed.")
_DRAIN = flags.DEFINE_float(
    "drain_timeout_s", DRAIN_TIMEOUT_S, "On SIGTERM, requests in flight get this many seconds "
    "to finish; then they are cancelled and the server exits.")
_LOG_LEVEL = flags.DEFINE_enum("log_level", "info", ["debug", "info", "warning", "error"],
                               "uvicorn's log level.")

for _name in ("max_batch", "chunk_steps", "max_tokens_limit", "max_request_bytes"):
    flags.register_validator(_name, lambda v: v >= 1, f"--{_name} must be >= 1")
for _name in ("max_queue", "max_context", "prefix_cache_tokens"):
    flags.register_validator(_name, lambda v: v >= 0, f"--{_name} must be >= 0")
for _name in ("idle_timeout_s", "drain_timeout_s"):
    flags.register_validator(_name, lambda v: v > 0, f"--{_name} must be > 0")
flags.register_validator("port", lambda v: 0 <= v <= 65535, "--port must be in [0, 65535]")
# The names seetjax.defaults.base_model.resolve_model_path knows (not imported here: flags are checked
# before anything heavy loads).
flags.register_validator("model", lambda v: v in ("", "embedded", "embedded:base")
                         or Path(v).is_dir(),
                         "--model must be an existing HF directory, '' or 'embedded:base'")
flags.register_validator("dtype", lambda v: v in ("float32", "bfloat16", "float16"),
                         "--dtype must be float32, bfloat16 or float16")


def main(argv):
    del argv
    import uvicorn

    from seetjax.defaults.base_model import resolve_model_path
    from seetjax.models.hf import load_hf_checkpoint
    from seetjax.models.tokenizer import Tokenizer
    from seetjax.runtime.cache import enable_compilation_cache
    from seetjax.serving.app import create_app
    from seetjax.serving.chat import min_context
    from seetjax.serving.connections import uvicorn_config
    from seetjax.serving.deps import ServerConfig
    from seetjax.serving.engine import Engine

    enable_compilation_cache()
    path = resolve_model_path(_MODEL.value)
    api_key = _API_KEY.value if _API_KEY.value is not None else os.environ.get("SEETJAX_API_KEY")
    tokenizer = Tokenizer.from_pretrained(path)
    least = min_context(tokenizer)
    if _MAX_CONTEXT.value and _MAX_CONTEXT.value < least:
        raise app.UsageError(f"--max_context={_MAX_CONTEXT.value} holds no reply: the shortest "
                             f"prompt and one reply token take {least} tokens")
    model = load_hf_checkpoint(path, dtype=_DTYPE.value)
    engine = Engine(model, tokenizer, max_batch=_MAX_BATCH.value, max_queue=_MAX_QUEUE.value,
                    chunk_steps=_CHUNK.value, max_context=_MAX_CONTEXT.value or None,
                    prefix_cache_tokens=_PREFIX.value, batching=_BATCHING.value)
    config = ServerConfig(model_name=_NAME.value or path.name, api_key=api_key or None,
                          max_request_bytes=_MAX_BYTES.value,
                          max_tokens_limit=_MAX_TOKENS.value)
    logging.info("serving %s as %r on http://%s:%d/v1 (max_batch %d, context %d%s)", path,
                 config.model_name, _HOST.value, _PORT.value, engine.max_batch,
                 engine.max_context, ", API key required" if config.api_key else "")
    uvicorn.Server(uvicorn_config(
        create_app(engine, config), host=_HOST.value, port=_PORT.value,
        idle_timeout_s=_IDLE.value, drain_timeout_s=_DRAIN.value,
        log_level=_LOG_LEVEL.value)).run()


if __name__ == "__main__":
    app.run(main)
