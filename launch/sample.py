"""Samples replies to the opening turn of BFCL multi-turn tasks from a model directory, and times
the sampler (prefill and decode, first call compiling, second compiled).

    python launch/sample.py                                   # the embedded default, untrained
    python launch/sample.py --model=runs/tiny/model --temperature=0
    python launch/sample.py --model=/models/Qwen2.5-1.5B-Instruct --prompt_style=native \
        --dtype=bfloat16
"""

import math
import time

import jax
from absl import app, flags
from flax import nnx

from seetjax.defaults.base_model import resolve_model_path
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer
from seetjax.runtime.cache import enable_compilation_cache
from seetjax.sampling import Sampler, SamplingParams

_MODEL = flags.DEFINE_string(
    "model", "", "HF directory; '' = the embedded default, 'embedded:base' its pretrained base.")
_CATEGORY = flags.DEFINE_string("category", "base", "BFCL multi-turn category.")
_TASKS = flags.DEFINE_integer("num_tasks", 4, "Tasks (their first turn).")
_SAMPLES = flags.DEFINE_integer("samples", 2, "Replies per task.")
_PROMPT_STYLE = flags.DEFINE_enum("prompt_style", "compact", ["bfcl", "native", "compact"],
                                  "How tools are shown.")
_DESCRIPTION_CHARS = flags.DEFINE_integer("compact_description_chars", 0,
                                          "compact style: characters of each tool's description.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "0 = greedy.")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Nucleus sampling.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 48, "Tokens per reply.")
_DTYPE = flags.DEFINE_string("dtype", "float32", "Parameter and compute dtype.")
flags.register_validator("temperature", lambda v: math.isfinite(v) and v >= 0,
                         "--temperature must be a finite number >= 0")
flags.register_validator("top_p", lambda v: math.isfinite(v) and 0 < v <= 1,
                         "--top_p must be a finite number in (0, 1]")


def main(argv):
    del argv
    enable_compilation_cache()
    start = time.perf_counter()
    path = resolve_model_path(_MODEL.value)
    model = load_hf_checkpoint(path, dtype=_DTYPE.value)
    tokenizer = Tokenizer.from_pretrained(path)
    cfg = model.config
    print(f"model: {path}\n  {cfg.model_type}, {cfg.num_params() / 1e6:.1f}M parameters, "
          f"vocab {len(tokenizer)}, loaded in {time.perf_counter() - start:.1f}s "
          f"on {jax.devices()[0].platform}")
    env = BfclEnv(BfclEnvConfig(prompt_style=_PROMPT_STYLE.value,
                                compact_description_chars=_DESCRIPTION_CHARS.value))
    prompts, questions = [], []
    for task in load_tasks(_CATEGORY.value)[:_TASKS.value]:
        prompts.append(tokenizer.chat_ids(env.reset(task), env.tools, add_generation_prompt=True))
        questions += [task.turns[0][0]["content"]] * _SAMPLES.value
    # Samples of one task share its prompt: prefill it once, then copy the cached row.
    rows = [i for i in range(len(prompts)) for _ in range(_SAMPLES.value)]
    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    params = nnx.state(model)
    sampling = SamplingParams(temperature=_TEMPERATURE.value, top_p=_TOP_P.value)
    for label in ("first call (compiles)", "second call (compiled)"):
        start = time.perf_counter()
        seqs = sampler.select(sampler.prefill(params, prompts), rows)
        jax.block_until_ready(seqs.state.logits)
        prefilled = time.perf_counter()
        _, completions = sampler.generate(params, seqs, jax.random.key(0), _MAX_NEW.value,
                                          tokenizer.stop_ids, sampling)
        done = time.perf_counter()
        new = sum(len(c.tokens) for c in completions)
        print(f"{label}: prefill {sum(map(len, prompts))} prompt tokens in "
              f"{prefilled - start:.2f}s, decode {new} new tokens in {done - prefilled:.2f}s "
              f"({new / (done - prefilled):.0f} tokens/s); "
              f"{sampler.compile_count()} programs compiled so far")
    print()
    for question, completion in zip(questions, completions):
        text = tokenizer.decode(completion.tokens)
        mean_lp = sum(completion.logprobs) / max(1, len(completion.logprobs))
        print(f"user: {question[:100]}\nassistant ({len(completion.tokens)} tokens, "
              f"{completion.finish_reason}, mean logprob {mean_lp:.2f}): {text[:160]!r}\n")


if __name__ == "__main__":
    app.run(main)
