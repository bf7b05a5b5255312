"""Sampler throughput: seetjax's jitted KV-cache sampler vs transformers `generate`, side by side.

Same random tiny Qwen2 weights (PRESETS['tiny-qwen2']), same batch, prompt length and number of new
tokens, temperature-1 sampling, in one run: both pinned to the same `--threads` CPUs, warmed up,
timed in alternating rounds; prints median new tokens/s of each with its spread, and their ratio,
and appends a row to BENCHMARKS.md. On a GPU it also times prefill and decode of a
Qwen2.5-1.5B-shaped random model in bf16 apart, and reports decode against the HBM bound.

    python experiments/benchmarks/bench_sampler.py [--batch 8 --prompt 256 --new 128]
    python experiments/benchmarks/bench_sampler.py --decode-only --batch 64 --prompt 512  # GPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np
from flax import nnx

from seetjax.models import PRESETS, Transformer
from seetjax.models.hf import load_hf_checkpoint, save_hf_checkpoint
from seetjax.sampling import Sampler, SamplingParams

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from kernel_profile import profile, profile_text  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

TITLE = "Sampler: seetjax vs transformers generate (bench_sampler.py)"
COLUMNS = ["date", "machine", "setting", "seetjax new tok/s", "transformers new tok/s", "speed-up",
           "decode step vs memory floor"]
# Peak HBM bandwidth by device kind (vendor figures), for the decode roofline; first match wins.
HBM_BYTES_PER_S = {"H100 PCIe": 2.0e12, "H100 NVL": 3.9e12, "H100": 3.35e12, "H200": 4.8e12,
                   "A100": 2.0e12}


def seetjax_generate(sampler: Sampler, params, prompts, new: int, seed: int = 0):
    def run():
        seqs = sampler.prefill(params, prompts)
        _, completions = sampler.generate(params, seqs, jax.random.key(seed), new, [],
                                          SamplingParams(temperature=1.0))
        assert all(len(c.tokens) == new for c in completions)
    return run


def torch_generate(model_dir: str, prompts, new: int):
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.tensor(prompts)

    def run():
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=1.0, top_k=0, max_new_tokens=new, min_new_tokens=new,
                                 pad_token_id=0)
        assert out.shape[1] == ids.shape[1] + new
    return run


def cpu_comparison(batch: int, prompt: int, new: int, rounds: int) -> dict:
    """Both generators on the same prompts, warmed up, in alternating rounds; then seetjax's
    decode step alone against its memory-bandwidth floor."""
    cfg = PRESETS["tiny-qwen2"].replace(rope_theta=10000.0)
    prompts = np.random.RandomState(0).randint(3, cfg.vocab_size, (batch, prompt)).tolist()
    with tempfile.TemporaryDirectory() as model_dir:
        save_hf_checkpoint(Transformer(cfg, rngs=nnx.Rngs(0)), model_dir)
        model = load_hf_checkpoint(model_dir)
        sampler = Sampler(model, pad_id=0)
        params = nnx.state(model)
        times = alternate({"seetjax": seetjax_generate(sampler, params, prompts, new),
                           "transformers": torch_generate(model_dir, prompts, new)}, rounds)
        step, slots = decode_step_seconds(sampler, params, prompts, new, rounds)
    rates = {name: summary(t, batch * new) for name, t in times.items()}
    floor = decode_floor_seconds(cfg, batch, slots)
    return {"rates": rates, "ratio": rates["seetjax"].rate / rates["transformers"].rate,
            "compiles": sampler.compile_count(), "step": step, "floor": floor}


def decode_step_seconds(sampler: Sampler, params, prompts, new: int, repeats: int
                        ) -> tuple[float, int]:
    """Median wall time of one decode step (prefill excluded, `new` steps per generate call),
    and the cache slots per row the decoding attended over."""
    def once() -> tuple[float, int]:
        seqs = sampler.prefill(params, prompts)
        jax.block_until_ready(seqs.state.logits)
        start = time.perf_counter()
        seqs, _ = sampler.generate(params, seqs, jax.random.key(1), new, [],
                                   SamplingParams(temperature=1.0))
        return (time.perf_counter() - start) / new, seqs.state.cache.slots
    runs = [once() for _ in range(repeats)]
    return statistics.median(t for t, _ in runs), runs[0][1]


def decode_floor_seconds(cfg, batch: int, slots: int) -> dict:
    """The bytes one decode step must read (every weight once; every row's cached keys and
    values over all `slots` cache slots, as attention reads them) over a copy bandwidth measured
    on a buffer of that size (bytes read + written per second, STREAM's convention)."""
    itemsize = np.dtype(cfg.dtype).itemsize
    kv = batch * slots * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * itemsize
    step_bytes = cfg.num_params() * itemsize + kv
    bandwidth = copy_bandwidth(step_bytes)
    return {"bytes": step_bytes, "bandwidth": bandwidth, "seconds": step_bytes / bandwidth}


def copy_bandwidth(nbytes: int) -> float:
    """Bytes read + written per second (STREAM's convention) copying an `nbytes` host buffer."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def decode_roofline(preset: str, dtype: str, batch: int, prompt: int, new: int, repeats: int,
                    trace: bool = False) -> dict:
    """Prefill and decode of a random `preset` model (weights and compute in `dtype`) on the
    default device, timed apart (medians of `repeats` after a compiling run), and one decode step
    against its memory bound: each step reads every weight once and each row's KV cache at the
    mean context (prompt + new / 2), over the device's peak HBM bandwidth (vendor figure; where
    the kind has none, e.g. a CPU, a measured copy bandwidth). With `trace`, one more decode
    traced: its ops' device time by name and the device's busy share (`kernel_profile.py`)."""
    cfg = PRESETS[preset].replace(param_dtype=dtype, dtype=dtype)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    params = nnx.state(model)
    prompts = np.random.RandomState(0).randint(3, cfg.vocab_size, (batch, prompt)).tolist()
    sampler = Sampler(model, pad_id=0)

    def once() -> tuple[float, float]:
        start = time.perf_counter()
        seqs = sampler.prefill(params, prompts)
        jax.block_until_ready(seqs.state.logits)
        middle = time.perf_counter()
        # generate returns the completions on the host: the decode is done when it returns.
        sampler.generate(params, seqs, jax.random.key(0), new, [], SamplingParams(temperature=1.0))
        return middle - start, time.perf_counter() - middle

    once()
    runs = [once() for _ in range(repeats)]
    prefill, decode = (statistics.median(r[i] for r in runs) for i in (0, 1))
    kind = jax.devices()[0].device_kind
    itemsize = np.dtype(dtype).itemsize
    weights = cfg.num_params() * itemsize
    kv = batch * (prompt + new / 2) * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize
    bandwidth = next((bw for name, bw in HBM_BYTES_PER_S.items() if name in kind), None)
    source = "peak HBM" if bandwidth else "measured host copy"
    bandwidth = bandwidth or copy_bandwidth(int(weights + kv))
    step, bound = decode / new, (weights + kv) / bandwidth
    traced = {}
    if trace:
        seqs = sampler.prefill(params, prompts)
        jax.block_until_ready(seqs.state.logits)
        traced = {"profile": profile(lambda: sampler.generate(
            params, seqs, jax.random.key(0), new, [], SamplingParams(temperature=1.0)))}
    r = {"device": kind, "preset": preset, "dtype": dtype, "batch": batch, "prompt": prompt,
         "new": new, "prefill_s": prefill, "prefill_tokens_per_s": batch * prompt / prefill,
         "decode_s": decode, "decode_tokens_per_s": batch * new / decode, "step_s": step,
         "weights_bytes": weights, "kv_bytes": kv, "bandwidth": bandwidth,
         "bandwidth_source": source, "bound_s": bound, "fraction_of_bound": bound / step,
         "compiles": sampler.compile_count(), **traced}
    return dict(r, roofline=roofline_text(r))


def roofline_text(r: dict) -> str:
    """E.g. 'step 11.20 ms; bound 3.70 ms = (3.09 GB weights + 9.33 GB KV at mean context) /
    3,350 GB/s peak HBM: 33% of the bound'."""
    return (f"step {r['step_s'] * 1e3:.2f} ms; bound {r['bound_s'] * 1e3:.2f} ms = "
            f"({r['weights_bytes'] / 1e9:.2f} GB weights + {r['kv_bytes'] / 1e9:.2f} GB KV at mean "
            f"context) / {r['bandwidth'] / 1e9:,.0f} GB/s {r['bandwidth_source']}: "
            f"{r['fraction_of_bound']:.0%} of the bound")


def decode_row(date: str, r: dict) -> list[str]:
    setting = (f"{r['preset']}-shaped {r['dtype']}, batch {r['batch']}, prompt {r['prompt']}, "
               f"{r['new']} new, T=1; prefill {r['prefill_tokens_per_s']:,.0f} prompt tok/s "
               f"({r['prefill_s']:.2f} s), decode alone")
    return [date, r["device"], setting, f"{r['decode_tokens_per_s']:,.0f}", "-", "-",
            roofline_text(r)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds")
    parser.add_argument("--threads", type=int, default=0, help="CPUs for both sides (0: all)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--decode-only", action="store_true",
                        help="no transformers comparison: prefill and decode of --preset in "
                             "--dtype at --batch/--prompt/--new on the default device, against "
                             "its memory bound")
    parser.add_argument("--preset", default="qwen2.5-1.5b", help="with --decode-only")
    parser.add_argument("--dtype", default="bfloat16", help="with --decode-only")
    parser.add_argument("--json", help="also write the decode figures to this file")
    parser.add_argument("--profile", action="store_true",
                        help="with --decode-only: one more decode traced, its ops summed by "
                             "name (kernel_profile.py)")
    args = parser.parse_args()
    cpus = pin_threads(args.threads)
    date = datetime.date.today().isoformat()
    if args.decode_only:
        g = decode_roofline(args.preset, args.dtype, args.batch, args.prompt, args.new,
                            args.repeats, trace=args.profile)
        finish([decode_row(date, g)], g, args)
        return
    r = cpu_comparison(args.batch, args.prompt, args.new, args.repeats)
    rates = r["rates"]
    print(f"seetjax {rates['seetjax']} new tokens/s, transformers {rates['transformers']} new "
          f"tokens/s, ratio {r['ratio']:.2f}x ({r['compiles']} compiled programs)")
    floor = r["floor"]
    over = r["step"] / floor["seconds"]
    print(f"decode step {r['step'] * 1e3:.2f} ms; floor {floor['seconds'] * 1e3:.2f} ms "
          f"({floor['bytes'] / 1e6:.1f} MB read at a measured {floor['bandwidth'] / 1e9:.1f} GB/s "
          f"copy bandwidth): {over:.1f}x the floor")
    setting = (f"tiny-qwen2 f32, batch {args.batch}, prompt {args.prompt}, {args.new} new, T=1, "
               f"{len(cpus)} threads each, median of {args.repeats} alternating rounds, "
               f"load {load():.1f}")
    record("sampler (new tokens)", setting, rates, f"{r['ratio']:.2f}x")
    rows = [[date, cpu_machine(), setting, str(rates["seetjax"]), str(rates["transformers"]),
             f"{r['ratio']:.2f}x", f"{r['step'] * 1e3:.2f} ms = {over:.1f}x its floor of "
             f"{floor['seconds'] * 1e3:.2f} ms"]]
    g = None
    if jax.devices()[0].platform == "gpu":
        g = decode_roofline("qwen2.5-1.5b", "bfloat16", batch=64, prompt=512, new=128,
                            repeats=args.repeats)
        rows.append(decode_row(date, g))
    finish(rows, g, args)


def finish(rows: list[list[str]], decode: dict | None, args: argparse.Namespace) -> None:
    """Prints the decode figures, writes them to --json, and the rows to BENCHMARKS.md."""
    if decode:
        print(f"{decode['device']}: {decode['preset']} {decode['dtype']} prefill "
              f"{decode['prefill_tokens_per_s']:,.0f} prompt tok/s, decode "
              f"{decode['decode_tokens_per_s']:,.0f} new tok/s; {roofline_text(decode)}")
        if "profile" in decode:
            print(profile_text(decode["profile"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(decode, f, indent=1)
    if not args.no_write:
        for row in rows:
            add_row(TITLE, COLUMNS, row)


if __name__ == "__main__":
    main()
