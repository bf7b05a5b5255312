"""Samples replies to BFCL multi-turn prompts from a model: the embedded default or an HF directory.

    python launch/sample.py --config=configs/tiny.py [--config.model.path=/models/Qwen2.5-1.5B]
"""

import time

import jax
from absl import app
from flax import nnx
from ml_collections import config_flags

from seetjax.envs import bfcl_data
from seetjax.models.embedded import embedded_model_dir
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer
from seetjax.sampling import Sampler, SamplingParams

_CONFIG = config_flags.DEFINE_config_file("config", "configs/tiny.py", "Config file.")


def main(argv):
    del argv
    config = _CONFIG.value
    start = time.perf_counter()
    path = config.model.path or embedded_model_dir()
    model = load_hf_checkpoint(path, dtype=config.model.dtype,
                               compute_dtype=config.model.compute_dtype)
    tokenizer = Tokenizer.from_pretrained(path)
    cfg = model.config
    print(f"model: {path}\n  {cfg.model_type}, {cfg.num_params() / 1e6:.1f}M parameters, "
          f"vocab {len(tokenizer)}, loaded in {time.perf_counter() - start:.1f}s "
          f"on {jax.devices()[0].platform}")

    tasks = bfcl_data.load_category(config.demo.category)[:config.demo.num_tasks]
    prompts, questions = [], []
    for task in tasks:
        tools = [doc for name in task["involved_classes"] for doc in bfcl_data.load_func_docs(name)]
        question = task["question"][0][0]["content"]
        ids = tokenizer.chat_ids([{"role": "user", "content": question}], tools=tools,
                                 add_generation_prompt=True)
        prompts.append(ids)
        questions += [question] * config.demo.samples_per_task
    # Samples of one task share its prompt: prefill it once, then copy the cached row.
    rows = [i for i in range(len(prompts)) for _ in range(config.demo.samples_per_task)]

    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    params = nnx.state(model)
    sampling = SamplingParams(temperature=config.sampling.temperature,
                              top_k=config.sampling.top_k, top_p=config.sampling.top_p)
    rng = jax.random.key(config.seed)
    for label in ("first call (compiles)", "second call (compiled)"):
        start = time.perf_counter()
        seqs = sampler.select(sampler.prefill(params, prompts), rows)
        jax.block_until_ready(seqs.state.logits)
        prefilled = time.perf_counter()
        _, completions = sampler.generate(params, seqs, rng, config.sampling.max_new_tokens,
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
    print("The embedded default is randomly initialised: its replies are noise until trained.")




if __name__ == "__main__":
    app.run(main)
