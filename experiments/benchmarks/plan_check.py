"""The memory plan (seetjax.rl.memory_plan) against the compiled programs of a run, at its real
shapes, on whatever backend runs it (issue 42): the update at the plan's worst-case batch (every
episode and counterfactual pair filling its row, the LM head over every position), the sampler's
prefill at the plan's rows, slots and longest prompt chunk, and its decode loop at the plan's rows
and slots. Lowered and compiled, never run: the train state and the sampler's weights and cache
are `jax.ShapeDtypeStruct`s carrying their shardings, so the 1.5B state is not allocated (only the
batch, a few MB, is).

    .venv/bin/python experiments/benchmarks/plan_check.py --config=configs/scale_1_5b.py:tiny
    python experiments/benchmarks/plan_check.py --json /tmp/plan.json   # on a GPU: the 1.5B run

Prints, per program, each plan term beside `compiled.memory_analysis()`'s argument, output,
alias and temp bytes, and the update's temp / (gradients + activations): the share of the
learner phase the plan's transients account for (above 1: XLA holds more than planned). Each
program's JSON also names what is live at its peak (`peak`: the largest buffers, their shapes and
the jax functions that made them, from XLA's buffer-assignment dump), so a gap between plan and
program says which term is short.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seetjax.batch import PreferencePairs, TokenSequences, TrajectoryBatch  # noqa: E402
from seetjax.config.sections import load_config_file  # noqa: E402
from seetjax.learner import sharding as learner_sharding  # noqa: E402
from seetjax.learner.learner import Learner  # noqa: E402
from seetjax.learner.optimizer import make_optimizer  # noqa: E402
from seetjax.learner.state import new_train_state, prepare_model, split_model  # noqa: E402
from seetjax.models.config import ModelConfig  # noqa: E402
from seetjax.models.transformer import KVCache, Transformer  # noqa: E402
from seetjax.rl.config import Plan, build_plan  # noqa: E402
from seetjax.rl.memory_plan import GiB, MemoryPlan, model_config_of, plan_memory  # noqa: E402
from seetjax.rl.memory_terms import decode_bytes, prefill_bytes, prefill_chunk  # noqa: E402
from seetjax.runtime import sharding  # noqa: E402
from seetjax.runtime.cache import compilation_cache_off  # noqa: E402
from seetjax.runtime.sharding import mesh_sizes  # noqa: E402
from seetjax.sampling.next_token import SamplingParams  # noqa: E402
from seetjax.sampling.sampler import DecodeState, Sampler, bucket  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hlo_anatomy import parse_module, peak_buffers  # noqa: E402

PROGRAMS = ("update", "prefill", "decode")
_FIELDS = ("argument", "output", "alias", "temp")


def load_run(spec: str) -> ml_collections.ConfigDict:
    """A run config from 'path[:argument]' (as launch/train.py's --config reads it)."""
    path, _, arg = spec.partition(":")
    config = load_config_file(ROOT / path if not Path(path).is_absolute() else path,
                              *([arg] if arg else []))
    if config.model.path is None:  # a placeholder: only the shape is needed
        config.model.path = ""
    return config


def abstract(tree: Any, shardings: Any) -> Any:
    """`tree`'s arrays as ShapeDtypeStructs carrying `shardings` (nothing allocated)."""
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        tree, shardings)


def analysis(compiled: jax.stages.Compiled) -> dict[str, int]:
    """`compiled.memory_analysis()`'s argument, output, alias and temp bytes."""
    m = compiled.memory_analysis()
    return {f: int(getattr(m, f"{f}_size_in_bytes")) for f in _FIELDS}


def compile_with_peak(lowered: jax.stages.Lowered) -> tuple[dict[str, int], dict]:
    """(memory_analysis, `hlo_anatomy.peak_buffers`) of `lowered` compiled with XLA's dumps on
    (into a temporary folder: the buffers live at the peak come from its live-range report),
    past the persistent compilation cache, which would serve it without a dump."""
    with tempfile.TemporaryDirectory() as folder, compilation_cache_off():
        compiled = lowered.compile({"xla_dump_to": folder, "xla_dump_hlo_as_text": True})
        reports = sorted(Path(folder).glob("*after_optimizations-live-range.txt"))
        peak = (peak_buffers(reports[-1].read_text(), parse_module(compiled.as_text()))
                if reports else {})
    return analysis(compiled), peak


def full_batch(plan: Plan, cfg: ModelConfig, episodes: int, pairs: int) -> TrajectoryBatch:
    """The plan's worst case: `episodes` rows and `pairs` chosen/rejected pairs of
    `plan.row_length` real tokens each, every one but the first a target (so the LM head runs
    over every position, as the plan counts it)."""
    width, rng = plan.row_length, np.random.RandomState(0)

    def rows(n: int) -> TokenSequences:
        tokens = rng.randint(1, cfg.vocab_size, (n, width)).tolist()
        return TokenSequences.from_rows(tokens, [[0.0] + [1.0] * (width - 1)] * n, width)

    seqs = rows(episodes)
    old = np.where(np.asarray(seqs.loss_mask) > 0, -1.0, 0.0).astype(np.float32)
    batch = TrajectoryBatch(sequences=seqs, old_logprobs=old,
                            rewards=rng.randint(0, 2, episodes).astype(np.float32),
                            group_ids=(np.arange(episodes) // plan.rollout.group_size
                                       ).astype(np.int32))
    if pairs:
        batch = batch.replace(pairs=PreferencePairs(chosen=rows(pairs), rejected=rows(pairs),
                                                    weights=np.ones(pairs, np.float32)))
    return batch


def check_update(cfg: ModelConfig, plan: Plan, tasks: int, mesh: Mesh
                 ) -> tuple[dict[str, int], dict, dict[str, int]]:
    """(memory_analysis of the compiled update, its peak buffers, what it ran over) at the
    plan's batch."""
    learner_cfg = plan.learner
    lora = learner_cfg.lora
    model = nnx.eval_shape(lambda: prepare_model(Transformer(cfg, rngs=nnx.Rngs(0)), lora, 0))
    graphdef, params, frozen = split_model(model, lora is not None)
    init = lambda p, f: new_train_state(  # noqa: E731
        p, f, make_optimizer(learner_cfg.optimizer),
        learner_cfg.needs_reference and lora is None, 0)
    shapes = jax.eval_shape(init, params, frozen)
    rules = learner_sharding.family_rules(cfg)
    shardings = learner_sharding.tree_shardings(shapes, mesh, rules)
    learner = Learner(graphdef, cfg, learner_cfg, mesh, shardings)
    episodes = tasks * plan.rollout.group_size * plan.rollout.branch.rows_per_episode
    pairs = plan.max_pairs if {t.name for t in learner_cfg.losses} & {"dpo", "counterfactual"} \
        else 0
    batch = learner.place(learner.ready(full_batch(plan, cfg, episodes, pairs)))
    compiled, peak = compile_with_peak(learner._step.lower(abstract(shapes, shardings), batch))
    seqs = batch.sequences if batch.sequences.packing is None else batch.sequences.packing.rows
    return compiled, peak, {"batch_bytes": sum(x.nbytes for x in jax.tree.leaves(batch)),
                                "episode_rows": seqs.tokens.shape[0],
                                "row_width": seqs.tokens.shape[1], "pairs": pairs}


def sampler_inputs(cfg: ModelConfig, memory: MemoryPlan, mesh: Mesh) -> tuple[Any, ...]:
    """(sampler, abstract params, abstract decode state, rows, slots) at the plan's rows/slots."""
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    sampler = Sampler(model, pad_id=0, mesh=mesh)
    rows = memory.rows["sampler_rows_per_device"] * sharding.batch_multiple(mesh)
    slots = memory.rows["kv_slots"]
    state = jax.eval_shape(lambda: DecodeState(
        cache=KVCache.zeros(cfg, rows, slots),
        logits=jnp.zeros((rows, cfg.vocab_size), jnp.float32)))
    # placed as the learner places the weights it hands the sampler (`Learner.model`)
    params = nnx.state(model)
    params = abstract(params, sharding.state_shardings(params, mesh,
                                                       learner_sharding.family_rules(cfg)))
    return sampler, params, abstract(state, sampler._state_shardings(state)), rows, slots


def rows_array(mesh: Mesh, shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    """An abstract [rows, ...] input split over the batch axes, as `Sampler._rows_array`."""
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding.named(
        mesh, ("batch",) + (None,) * (len(shape) - 1), shape))


def check_prefill(cfg: ModelConfig, memory: MemoryPlan, mesh: Mesh
                  ) -> tuple[dict[str, int], dict, dict[str, int]]:
    """(memory_analysis, peak buffers, shapes) of a prompt chunk at the plan's rows and slots,
    the chunk `Sampler._chunk_size` takes there."""
    sampler, params, state, rows, slots = sampler_inputs(cfg, memory, mesh)
    chunk = prefill_chunk(cfg, rows, slots)
    tokens = rows_array(mesh, (rows, chunk), jnp.int32)
    valid = rows_array(mesh, (rows, chunk), jnp.bool_)
    compiled, peak = compile_with_peak(sampler._prefill.lower(params, state, tokens, valid,
                                                              window=slots))
    return compiled, peak, {"rows": rows, "slots": slots, "chunk": chunk}


def check_decode(cfg: ModelConfig, plan: Plan, memory: MemoryPlan, mesh: Mesh
                 ) -> tuple[dict[str, int], dict, dict[str, int]]:
    """(memory_analysis, peak buffers, shapes) of the decode loop at the plan's rows and slots,
    for one `rollout.decode_chunk` (else a whole reply) of steps."""
    sampler, params, state, rows, slots = sampler_inputs(cfg, memory, mesh)
    steps = bucket(plan.rollout.decode_chunk or plan.rollout.limits.max_reply_tokens,
                   sampler.min_steps)
    rng = jax.ShapeDtypeStruct((2,), jnp.uint32)
    compiled, peak = compile_with_peak(sampler._decode.lower(
        params, state, rng, rows_array(mesh, (rows,), jnp.int32),
        rows_array(mesh, (rows, 1), jnp.int32), sampling=SamplingParams(), num_steps=steps,
        window=slots))
    return compiled, peak, {"rows": rows, "slots": slots, "steps": steps}


def planned(memory: MemoryPlan, cfg: ModelConfig, program: str, shapes: dict[str, int]) -> dict[str, int]:
    """What the plan says each figure of `program` holds, per device."""
    tensor = memory.mesh[2]
    if program == "update":
        resident = memory.resident
        return {"argument": resident + shapes["batch_bytes"], "output": resident,
                "alias": resident,  # the state is donated
                "temp": memory.gradients + memory.activations,
                "gradients": memory.gradients, "activations": memory.activations}
    weights = memory.sampler_copy or memory.masters
    state = memory.kv_cache + memory.rows["sampler_rows_per_device"] * cfg.vocab_size * 4
    per_device_rows = memory.rows["sampler_rows_per_device"]
    temp = (prefill_bytes(cfg, per_device_rows, shapes["chunk"], shapes["slots"], tensor)
            if program == "prefill" else decode_bytes(cfg, per_device_rows, shapes["slots"],
                                                      tensor))
    return {"argument": weights + state, "output": state, "alias": state, "temp": temp}


def run_check(config: ml_collections.ConfigDict, programs: tuple[str, ...] = PROGRAMS,
              each: Callable[[dict[str, Any]], None] = lambda result: None) -> dict[str, Any]:
    """Every program of `programs` compiled at the shapes the plan of run `config` (a
    ConfigDict) assumes, beside the plan's terms; `each(result so far)` after every program
    (a check cut off at its cap keeps what it did)."""
    plan = build_plan(config)
    cfg = model_config_of(config).replace(value_head=plan.learner.term("value") is not None)
    wanted = plan.learner.mesh  # a -1 spreads over every device, else these devices only
    sizes = mesh_sizes(wanted, jax.device_count() if -1 in wanted else math.prod(wanted))
    mesh = learner_sharding.mesh_from_config(sizes, jax.devices()[:math.prod(sizes)])
    tasks = config.data.tasks_per_step
    memory = plan_memory(cfg, plan, tasks, mesh=sizes, backend=jax.default_backend())
    out: dict[str, Any] = {"backend": jax.default_backend(),
                           "device": jax.devices()[0].device_kind, "jax": jax.__version__,
                           "mesh": sizes, "plan_rows": memory.rows,
                           "plan_gib": {k: round(getattr(memory, k) / GiB, 3) for k in (
                               "masters", "optimizer", "reference", "gradients", "activations",
                               "sampler_copy", "kv_cache", "sampler_work", "learner_peak",
                               "sampling_peak")}, "programs": {}}
    for program in programs:
        start = time.perf_counter()
        if program == "update":
            compiled, peak, shapes = check_update(cfg, plan, tasks, mesh)
        elif program == "prefill":
            compiled, peak, shapes = check_prefill(cfg, memory, mesh)
        else:
            compiled, peak, shapes = check_decode(cfg, plan, memory, mesh)
        out["programs"][program] = {"compiled": compiled, "shapes": shapes, "peak": peak,
                                    "planned": planned(memory, cfg, program, shapes),
                                    "compile_s": round(time.perf_counter() - start, 1)}
        if program == "update":
            update = out["programs"]["update"]
            update["temp_over_planned"] = round(
                update["compiled"]["temp"] / update["planned"]["temp"], 3)
        out["headline"] = headline(out)
        each(out)
    return out


def headline(result: dict[str, Any]) -> str:
    """'update temp X GiB vs planned Y (gradients+activations), peak: the 3 largest buffers;
    prefill ...; decode ...'."""
    parts = []
    for program, r in result["programs"].items():
        what = "gradients+activations" if program == "update" else "work"
        largest = ", ".join(f"{b['shape']} {b['bytes'] / GiB:.2f}"
                            for b in r["peak"].get("largest", [])[:3])
        parts.append(f"{program} temp {r['compiled']['temp'] / GiB:.2f} GiB vs planned "
                     f"{r['planned']['temp'] / GiB:.2f} ({what})"
                     + (f", peak {r['peak']['live_bytes'] / GiB:.2f} GiB live: {largest}"
                        if largest else ""))
    return "; ".join(parts)


def table(result: dict[str, Any]) -> str:
    """Markdown: per program, each figure compiled against planned, GiB per device."""
    lines = ["| program | figure | compiled GiB | planned GiB | compiled / planned |",
             "|---|---|---:|---:|---:|"]
    for program, r in result["programs"].items():
        for field in _FIELDS:
            got, want = r["compiled"][field], r["planned"].get(field)
            ratio = f"{got / want:.3f}" if want else "-"
            lines.append(f"| {program} | {field} | {got / GiB:.3f} | "
                         f"{'-' if want is None else f'{want / GiB:.3f}'} | {ratio} |")
        for term in ("gradients", "activations"):
            if term in r["planned"]:
                lines.append(f"| {program} | (plan: {term}) | | {r['planned'][term] / GiB:.3f} "
                             "| |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/scale_1_5b.py",
                        help="a run config, path[:argument]")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"comma-separated, of {list(PROGRAMS)}")
    args = parser.parse_args()
    programs = tuple(p for p in args.programs.split(",") if p)
    unknown = set(programs) - set(PROGRAMS)
    if unknown or not programs:
        parser.error(f"--programs={args.programs}: unknown {sorted(unknown)}; of "
                     f"{list(PROGRAMS)}")
    def write(result: dict[str, Any]) -> None:
        if args.json:
            args.json.write_text(json.dumps({"config": args.config, **result}, indent=1))

    result = run_check(load_run(args.config), programs, write)
    print(f"{args.config} on {result['device']} ({result['backend']}), mesh "
          f"{result['mesh']}; plan rows {result['plan_rows']}")
    for program, r in result["programs"].items():
        print(f"{program}: {r['shapes']}, compiled in {r['compile_s']} s")
    print(table(result))
    print(result["headline"])


if __name__ == "__main__":
    main()
