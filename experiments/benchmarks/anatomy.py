"""Anatomy of the sampler's decode step and the learner's update, without a profiler (issue 42):
what the compiled programs move per step, read from XLA's cost and memory analyses and the
optimized HLO (`hlo_anatomy`), and a few cheap timed decompositions of the decode step.

    python experiments/benchmarks/anatomy.py --json /tmp/anatomy.json            # GPU setting
    python experiments/benchmarks/anatomy.py --preset tiny-qwen2 --dtype float32 \
        --batch 4 --prompt 16 --new 16 --rows 2 --length 64 --json /tmp/a.json   # CPU, tiny

Sections, in this order, each written to --json as soon as it ends (a run cut off at a time cap
keeps the ones done; --budget-s skips the rest once spent):

  decode    `_decode` (the sampler's lax.while_loop) compiled at `--batch` rows with the cache at
            slot bucket S = bucket(prompt + new): cost and memory analyses, the loop body's ops
            ranked by bytes, its copies, its cache updates (in place or not), how many cache
            slots the attention reads per step, fusions; then the step timed at T=1 (the
            benchmark's path), the cache's lengths at the prompt (attention cost does not depend
            on the lengths: it reads all S slots whatever they hold)
  learner   `Learner._step` at `--rows` x `--length` (bench_learner.py's GRPO update): the same
            analyses over the whole program and its largest loop body
  greedy    the decode step with argmax instead of sampling
  forward   the model's step alone: one token per row through the model without a cache
            (weights only: no cache read or write, no sampling), the steps in one device loop
            (until 2026-11-27 dispatched one by one from Python, which the GPU figure of that
            day, 2.35 ms, includes)
  slots4x   the decode step with the cache at 4S slots (how the step scales with the slots)
  top_p     the decode step with top-p 0.9 (the path that sorts each row's logits)

Each of the last four is timed in alternating rounds with the T=1 step (harness.alternate), and
reported as its ratio to it: on a loaded machine only such paired figures compare.

XLA's cost analysis counts a while loop's body once, not once per trip: the decode program's
flops and bytes are one step's plus the code around the loop.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.learner import create_learner, learner_config
from seetjax.models import PRESETS, KVCache, Transformer
from seetjax.sampling import Sampler, SamplingParams
from seetjax.sampling.sampler import DecodeState, bucket

sys.path.insert(0, os.path.dirname(__file__))
import hlo_anatomy as hlo  # noqa: E402
from bench_learner import EPS, LR, MAX_NORM, make_batch  # noqa: E402
from bench_sampler import HBM_BYTES_PER_S, copy_bandwidth  # noqa: E402
from harness import alternate, load  # noqa: E402

SECTIONS = ("decode", "learner", "greedy", "forward", "slots4x", "top_p")
VARIANT_NAMES = ("greedy", "forward", "slots4x", "top_p")  # timed against the T=1 step
VARIANTS = {"decode": (SamplingParams(temperature=1.0), 1),
            "greedy": (SamplingParams(temperature=0.0), 1),
            "slots4x": (SamplingParams(temperature=1.0), 4),
            "top_p": (SamplingParams(temperature=1.0, top_p=0.9), 1)}


def program_summary(compiled) -> tuple[dict, hlo.Module]:
    """Cost and memory analyses of a compiled program, the anatomy of its entry computation and
    of its largest while body (where it has one), and its parsed HLO."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    memory = compiled.memory_analysis()
    module = hlo.parse_module(compiled.as_text())
    parts = {"entry": module.entry}
    if hlo.loops(module):
        parts["loop_body"] = hlo.largest_loop_body(module)
    return {
        "cost": {k: float(cost[k]) for k in ("flops", "bytes accessed", "transcendentals")
                 if k in cost},
        "memory": {k: int(getattr(memory, k)) for k in (
            "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes")} if memory else {},
        "fusions_in_module": hlo.fusions(module),
        "loops": [{"in": where, "trip_count": hlo.trip_count(w),
                   "body_ops": len(module.computations[w.called("body")])}
                  for where, w in hlo.loops(module)],
        **{part: {"computation": name, "ops": len(module.computations[name]),
                  "fusions": hlo.fusions(module, name), "copies": hlo.copies(module, name),
                  "updates": hlo.updates(module, name), "top_ops": hlo.ranked(module, name)}
           for part, name in parts.items()},
    }, module


class DecodeBench:
    """A random `preset` model, its sampler, and decode programs at the given shapes."""

    def __init__(self, preset: str, dtype: str, batch: int, prompt: int, new: int):
        self.cfg = PRESETS[preset].replace(param_dtype=dtype, dtype=dtype)
        self.model = Transformer(self.cfg, rngs=nnx.Rngs(0))
        self.params = nnx.state(self.model)
        self.sampler = Sampler(self.model, pad_id=0)
        self.rows = self.sampler._padded_rows(batch)
        self.prompt, self.new = prompt, new
        self.slots = bucket(prompt + new, self.sampler.min_slots)
        self.steps = bucket(new, self.sampler.min_steps)
        self.max_new = jnp.full((self.rows,), new, jnp.int32)
        self.stops = jnp.full((self.rows, 1), -1, jnp.int32)
        self.baseline: Callable[[], None] | None = None  # the T=1 decoder, once compiled

    def state(self, slots: int) -> DecodeState:
        """A cache of `slots` slots whose rows hold `prompt` tokens, and random logits."""
        cache = KVCache.zeros(self.cfg, self.rows, slots)
        cache = cache.replace(lengths=jnp.full((self.rows,), self.prompt, jnp.int32))
        logits = jax.random.normal(jax.random.key(1), (self.rows, self.cfg.vocab_size))
        return DecodeState(cache=cache, logits=logits)

    def compile(self, sampling: SamplingParams, slots: int):
        """The decode program at `slots` cache slots, lowered on the state's shapes alone."""
        return self.sampler._decode.lower(
            self.params, jax.eval_shape(lambda: self.state(slots)), jax.random.key(0), self.max_new,
            self.stops,
            sampling=sampling, num_steps=self.steps, window=slots).compile()

    def decoder(self, compiled, slots: int) -> Callable[[], None]:
        """One call of a compiled decode program (`new` steps), waited for. The program donates
        its state: each call feeds it the state the last one returned, its rows set back to the
        prompt's length."""
        box = {"state": self.state(slots)}

        def run() -> None:
            lengths = jnp.full((self.rows,), self.prompt, jnp.int32)  # donated with the state
            state = box["state"]
            state = state.replace(cache=state.cache.replace(lengths=lengths))
            box["state"] = jax.block_until_ready(
                compiled(self.params, state, jax.random.key(0), self.max_new, self.stops))[0]
        return run

    def forward(self) -> Callable[[], None]:
        """`new` steps of the model alone in one device loop (one token per row, no cache, no
        sampling; each step's argmax is the next step's token, so none can be skipped), as the
        decode loop runs them: no Python dispatch between steps."""
        graphdef, new = nnx.graphdef(self.model), self.new
        positions = jnp.full((self.rows, 1), self.prompt, jnp.int32)

        @jax.jit
        def steps(params: nnx.State, tokens: jax.Array) -> jax.Array:
            model = nnx.merge(graphdef, params)

            def body(_: int, t: jax.Array) -> jax.Array:
                logits = model(t, positions, jnp.ones_like(t))[0]
                return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]
            return jax.lax.fori_loop(0, new, body, tokens)

        tokens = jnp.ones((self.rows, 1), jnp.int32)

        def run() -> None:
            jax.block_until_ready(steps(self.params, tokens))
        return run

    def bound(self) -> dict:
        """The decode step's memory bound (docs/performance.md "On a GPU"): weights once and each
        row's KV at the mean context, and at all S slots (what the attention reads), over the
        device's peak HBM bandwidth (a measured host copy bandwidth on a CPU)."""
        itemsize = self.cfg.compute_dtype.itemsize
        per_token = 2 * self.cfg.num_layers * self.cfg.num_kv_heads * self.cfg.head_dim * itemsize
        weights = self.cfg.num_params() * itemsize
        mean = self.prompt + self.new / 2
        kind = jax.devices()[0].device_kind
        bandwidth = next((bw for name, bw in HBM_BYTES_PER_S.items() if name in kind), None)
        source = "peak HBM" if bandwidth else "measured host copy"
        bandwidth = bandwidth or copy_bandwidth(int(weights + self.rows * mean * per_token))
        kv_mean, kv_slots = self.rows * mean * per_token, self.rows * self.slots * per_token
        return {"weights_bytes": weights, "kv_mean_bytes": kv_mean, "kv_slots_bytes": kv_slots,
                "mean_context": mean, "slots": self.slots, "bandwidth": bandwidth,
                "bandwidth_source": source, "bound_s": (weights + kv_mean) / bandwidth,
                "bound_all_slots_s": (weights + kv_slots) / bandwidth}


def decode_section(bench: DecodeBench, repeats: int) -> dict:
    sampling, _ = VARIANTS["decode"]
    compiled = bench.compile(sampling, bench.slots)
    summary, module = program_summary(compiled)
    body = summary["loop_body"]["computation"]
    dtype = {"bfloat16": "bf16", "float32": "f32", "float16": "f16"}[bench.cfg.dtype]
    rows, heads, dim = bench.rows, bench.cfg.num_kv_heads, bench.cfg.head_dim
    cache = {(dtype, (rows, heads, dim, bench.slots)), (dtype, (rows, heads, bench.slots, dim))}
    readers = [{"name": i.name, "opcode": i.opcode, "shape": i.shape.split("{")[0]}
               for i in hlo.buffer_readers(module, body, cache)]
    bound = bench.bound()
    bench.baseline = bench.decoder(compiled, bench.slots)
    step = statistics.median(alternate({"T=1": bench.baseline}, repeats)["T=1"]) / bench.new
    return dict(summary, bound=bound, step_s=step, attention={
        "cache_readers": len(readers), "slots_read_per_step": bench.slots if readers else None,
        "live_mean_context": bound["mean_context"], "readers": readers[:4]},
        bytes_per_step_cost_analysis=summary["cost"].get("bytes accessed", 0.0),
        fraction_of_bound=bound["bound_s"] / step,
        model_flops_per_step=2 * bench.cfg.num_params() * bench.rows)


def variant_section(bench: DecodeBench, name: str, repeats: int) -> dict:
    """A variant's step time, timed in alternating rounds with the T=1 step (compiled first if
    the decode section did not run), so that load that comes and goes hits both alike."""
    if bench.baseline is None:
        bench.baseline = bench.decoder(bench.compile(VARIANTS["decode"][0], bench.slots),
                                       bench.slots)
    if name == "forward":
        run, detail = bench.forward(), {}
    else:
        sampling, factor = VARIANTS[name]
        slots = bench.slots * factor
        run, detail = bench.decoder(bench.compile(sampling, slots), slots), {
            "slots": slots, "sampling": str(sampling)}
    times = alternate({"T=1": bench.baseline, name: run}, repeats)
    step, base = (statistics.median(times[k]) / bench.new for k in (name, "T=1"))
    return dict(detail, step_s=step, baseline_step_s=base, ratio=step / base)


def learner_section(preset: str, dtype: str, rows: int, length: int) -> dict:
    """The compiled GRPO update of bench_learner.py at rows x length (compiled, not run)."""
    cfg = PRESETS[preset].replace(dtype=dtype)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    config = learner_config({"algorithm": "grpo", "loss": {"kl_coef": 0.0,
                                                           "aggregation": "token-mean"},
                             "advantage": {"eps": EPS},
                             "optimizer": {"learning_rate": LR, "max_grad_norm": MAX_NORM}})
    learner, state = create_learner(model, config, mesh=None)
    data = make_batch(rows, length, cfg.vocab_size)
    seqs = TokenSequences(tokens=data["tokens"], positions=np.tile(np.arange(length), (rows, 1)),
                          segment_ids=np.ones((rows, length), np.int32), loss_mask=data["mask"])
    batch = TrajectoryBatch(sequences=seqs, old_logprobs=data["old"], rewards=data["rewards"],
                            group_ids=data["groups"])
    compiled = learner._step.lower(state, learner.place(learner.ready(batch))).compile()
    summary, _ = program_summary(compiled)
    return dict(summary, model_flops=3 * cfg.flops_per_token(length) * rows * length)


def run_sections(args: argparse.Namespace, write: Callable[[dict], None]) -> dict:
    """Each requested section in SECTIONS' order, written out as it ends, until the budget."""
    start = time.monotonic()
    result = {"date": datetime.date.today().isoformat(), "device": jax.devices()[0].device_kind,
              "jax": jax.__version__, "load": round(load(), 1), "setting": dict(vars(args)),
              "sections": {}, "skipped": []}
    bench = None
    for name in [s for s in SECTIONS if s in args.sections]:
        if time.monotonic() - start > args.budget_s:
            result["skipped"].append(name)
            continue
        began = time.monotonic()
        if name == "learner":
            section = learner_section(args.preset, args.dtype, args.rows, args.length)
        else:
            bench = bench or DecodeBench(args.preset, args.dtype, args.batch, args.prompt,
                                         args.new)
            section = (decode_section(bench, args.repeats) if name == "decode" else
                       variant_section(bench, name, args.repeats))
        result["sections"][name] = dict(section, seconds=round(time.monotonic() - began, 1))
        result["headline"] = headline(result)
        write(result)
    return result


def _gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def headline(result: dict) -> str:
    """One line of the figures that matter (the GPU check's row)."""
    s, parts = result["sections"], []
    if "decode" in s:
        d, b = s["decode"], s["decode"]["bound"]
        body = d["loop_body"]
        parts.append(
            f"decode step {d['step_s'] * 1e3:.3g} ms at {b['slots']} slots ({d['fraction_of_bound']:.0%}"
            f" of the {b['bound_s'] * 1e3:.3g} ms bound; {b['bound_all_slots_s'] * 1e3:.3g} ms "
            f"reading all slots); body: {body['ops']} ops, {body['fusions']} fusions, "
            f"{body['copies']['count']} copies ({_gb(body['copies']['bytes'])}), "
            f"{body['updates']['count']} updates ({body['updates']['not_in_place']} not in place)"
            f"; attention reads {d['attention']['slots_read_per_step']} slots/step (live mean "
            f"{d['attention']['live_mean_context']:.0f})")
    times = [f"{n} {s[n]['step_s'] * 1e3:.3g} ms ({s[n]['ratio']:.2f}x T=1)" for n in VARIANT_NAMES
             if n in s]
    if times:
        parts.append("; ".join(times))
    if "learner" in s:
        lr = s["learner"]
        parts.append(f"update: {lr['entry']['copies']['count']} copies "
                     f"({_gb(lr['entry']['copies']['bytes'])}), temp "
                     f"{_gb(lr['memory'].get('temp_size_in_bytes', 0))}, "
                     f"{lr['fusions_in_module']} fusions")
    return " | ".join(parts) + (f" | skipped {', '.join(result['skipped'])}"
                                if result["skipped"] else "")


def markdown(result: dict) -> str:
    """The report: the headline, then each section's figures and top ops."""
    lines = [f"# Anatomy ({result['date']}, {result['device']}, jax {result['jax']}, load "
             f"{result['load']})", "", result.get("headline", ""), ""]
    s = result["sections"]
    if "decode" in s:
        d, b = s["decode"], s["decode"]["bound"]
        lines += [
            "## Decode step", "",
            f"- bound: {_gb(b['weights_bytes'])} weights + {_gb(b['kv_mean_bytes'])} KV at mean "
            f"context {b['mean_context']:.0f} = {b['bound_s'] * 1e3:.3g} ms at "
            f"{b['bandwidth'] / 1e9:,.0f} GB/s ({b['bandwidth_source']}); reading all "
            f"{b['slots']} slots: {_gb(b['kv_slots_bytes'])} KV, "
            f"{b['bound_all_slots_s'] * 1e3:.3g} ms",
            f"- cost analysis (loop body counted once): {d['cost'].get('flops', 0):.3g} flops "
            f"(model 2NB: {d['model_flops_per_step']:.3g}), "
            f"{_gb(d['bytes_per_step_cost_analysis'])} accessed",
            f"- memory: {', '.join(f'{k} {_gb(v)}' for k, v in d['memory'].items())}",
            f"- cache readers in the body: {d['attention']['cache_readers']} ops take a whole "
            f"layer's cache ({d['attention']['slots_read_per_step']} slots)", ""]
        lines += _top_ops(d["loop_body"]["top_ops"])
    times = {n: s[n] for n in VARIANT_NAMES if n in s}
    if times:
        lines += ["", "| variant | ms per step | T=1 alternating with it | ratio |",
                  "|---|---|---|---|"]
        lines += [f"| {n} | {t['step_s'] * 1e3:.3g} | {t['baseline_step_s'] * 1e3:.3g} | "
                  f"{t['ratio']:.2f}x |" for n, t in times.items()]
    if "learner" in s:
        lr = s["learner"]
        lines += ["", "## Update", "",
                  f"- cost analysis: {lr['cost'].get('flops', 0):.3g} flops (model "
                  f"{lr['model_flops']:.3g}; a loop body counted once), "
                  f"{_gb(lr['cost'].get('bytes accessed', 0))} accessed; loops {lr['loops']}",
                  f"- memory: {', '.join(f'{k} {_gb(v)}' for k, v in lr['memory'].items())}", ""]
        lines += _top_ops(lr["entry"]["top_ops"])
    return "\n".join(lines)


def _top_ops(rows: list[dict]) -> list[str]:
    return ["| op | opcode | result | operand + result bytes | from |", "|---|---|---|---|---|",
            *(f"| {r['name']} | {r['opcode']} | {r['shape']} | {_gb(r['bytes'])} | "
              f"{r['op_name'][-60:]} |" for r in rows[:8])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="qwen2.5-1.5b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--rows", type=int, default=8, help="the update's rows")
    parser.add_argument("--length", type=int, default=512, help="the update's row length")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, of {list(SECTIONS)}")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="start no section after this many seconds")
    parser.add_argument("--json", help="write the figures here (after every section)")
    args = parser.parse_args()
    args.sections = args.sections.split(",")
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections={','.join(args.sections)}: unknown {sorted(unknown)}")

    def write(result: dict) -> None:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1, default=str)

    print(markdown(run_sections(args, write)))


if __name__ == "__main__":
    main()
