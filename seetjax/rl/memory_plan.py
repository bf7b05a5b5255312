"""A run's device memory, planned from its config before anything loads or compiles.

    memory = plan_memory(model_config_of(config, preset="qwen2.5-1.5b"), build_plan(config),
                         config.data.tasks_per_step, mesh=(1, 8, 1))
    print(plans_table([("fsdp=8", memory)]))
    memory.check(80 * GiB, alternatives(...))    # MemoryPlanError naming what to change

Per device, in bytes. The states are exact: their shapes come from `jax.eval_shape` of the
learner's own initial state (`seetjax.learner.state.new_train_state` over the model with its
LoRA adapters) and their shards from the rule table the learner places them with
(`seetjax.runtime.sharding.logical_to_spec`), on an abstract mesh, so a plan for 16 devices
runs on a machine with one. The transients are arithmetic over the shapes the run will use:

- gradients: the f32 accumulator of the micro-batches' gradients (`learner/step.py`), into
  which XLA adds each micro-batch's as they are produced;
- KV cache: every layer's keys and values [rows, kv_heads, head_dim, slots] in the compute dtype,
  rows and slots bucketed to powers of two as the sampler does (`sampling/sampler.py`), slots for
  the longest episode plus a reply; and a second cache as large: `Sampler.select` (episodes
  that end, forks) gathers rows into a new cache while the old one lives (no donation: rows move),
  more than the old half a growing cache holds beside the new one;
- activations of one micro-batch, every episode filling its row (packing only lowers this):
  per layer `ACT_HIDDEN` hidden-sized and `ACT_FFN` FFN-sized arrays per token in the compute
  dtype and `ACT_SCORES` f32 attention-score blocks per head (none under cuDNN's fused
  attention), held for every layer without remat, for one layer (plus each layer's input, or
  with "dots" each matmul's output) under remat; `ACT_LOGITS` f32 logits per LM-head position
  (a `logprob_chunk` at a time); `ACT_ATTENTION` bytes per (query, key) pair of a row and
  query head, one layer's attention temporaries over all its blocks (the boolean mask alone
  under the fused kernel). The counts are what XLA keeps for this decoder's backward pass, fitted to
  `compiled.memory_analysis()` on the CPU (tests/rl/test_memory_plan.py), where XLA keeps every
  layer's internals whatever the remat policy: a CPU plan counts remat as "none";
- the sampler: its next-token logits [rows, vocab] f32 and the larger of a prompt chunk's
  scores (bounded as `Sampler._chunk_size` bounds them) and a decode step's.

With `rollout.schedule="async"` the sampler plays with weight snapshots (the sampling weights,
frozen part included, `lag` + 1 copies alive: `seetjax.rl.async_rollouts`) instead of the
learner's arrays, and on shared devices the rollout plays during the update: the peak is both
phases at once. With `rollout.sampler_devices` the sampling figures are a sampler device's (a data
mesh of its own: the weights whole, no train state; for the engine a tensor mesh: the weights and
KV heads split, every row on each device) and the learner's a learner device's.

Not counted: XLA's own workspace, and the reference pass before the update (a forward pass
over one micro-batch at a time, without gradients: less than the update's).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import AbstractMesh

from seetjax.defaults.base_model import resolve_model_path
from seetjax.errors import invalid
from seetjax.learner.sharding import family_rules
from seetjax.models.config import PRESETS, ModelConfig
from seetjax.models.hf import config_from_hf
from seetjax.models.lora import LoRAConfig
from seetjax.rl.config import Plan, build_plan
from seetjax.rl.memory_terms import (
    SAMPLER_MIN_SLOTS,
    SAMPLER_MIN_STEPS,
    abstract_state,
    activation_bytes,
    decode_bytes,
    per_device,
    prefill_bytes,
    prefill_chunk,
    tree_bytes,
    uses_fused_attention,
)
from seetjax.rl.start_model import model_options
from seetjax.runtime.sharding import MESH_AXES, mesh_sizes
from seetjax.sampling.sampler import bucket

GiB = 1 << 30


class MemoryPlanError(ValueError):
    """A plan that does not fit its device; the message names what to change, with figures."""


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of each part of a run (see the module docstring), and where it lives."""

    mesh: tuple[int, int, int]
    masters: int  # the trainable parameters (f32 masters)
    optimizer: int
    frozen: int  # the untrained part of the model (a LoRA base), storage dtype
    reference: int  # the KL reference copy (full fine-tuning with a KL term)
    sampler_copy: int  # the trained parameters cast to the storage dtype (0 in f32: shared)
    gradients: int
    activations: int
    kv_cache: int
    kv_copy: int  # a second cache while `Sampler.select` gathers rows (or the cache grows)
    sampler_work: int  # next-token logits and one layer's decode / prefill-chunk work
    rows: dict[str, int]  # what the figures assume: learner micro-batch rows and width, ...
    # rollout.schedule "async": the weight snapshots alive at once (sampling weights, frozen
    # part included, copied `lag` + 1 times), and both phases at once on shared devices
    snapshots: int = 0
    concurrent: bool = False
    # rollout.sampler_devices > 0: the sampling phase's figures are a sampler device's, which
    # holds no train state; the learner's are a learner device's
    split: bool = False

    @property
    def resident(self) -> int:
        """What lives through both phases: the train state."""
        return self.masters + self.optimizer + self.frozen + self.reference

    @property
    def learner_peak(self) -> int:
        kept = 0 if self.split else self.snapshots  # the snapshots outlive the sampling
        return self.resident + kept + self.gradients + self.activations

    @property
    def sampling_peak(self) -> int:
        return ((0 if self.split else self.resident) + self.sampler_copy + self.snapshots
                + self.kv_cache + self.kv_copy + self.sampler_work)

    @property
    def peak(self) -> int:
        if self.concurrent and not self.split:  # the rollout plays during the update
            return self.sampling_peak + self.gradients + self.activations
        return max(self.learner_peak, self.sampling_peak)

    def check(self, budget: int, alternatives: Sequence[tuple[str, MemoryPlan]] = ()) -> None:
        """Raises MemoryPlanError when the peak passes `budget` bytes, naming the phase, its
        largest parts and each of `alternatives` (a change, its plan) with its peak."""
        if self.peak <= budget:
            return
        phase = "learner" if self.learner_peak >= self.sampling_peak else "sampling"
        if self.concurrent and not self.split:
            phase = "overlapped (async)"
        states = ("masters", "optimizer", "reference")
        learning, sampling = ("gradients", "activations"), ("sampler_copy", "snapshots",
                                                            "kv_cache", "kv_copy", "sampler_work")
        parts = {"learner": states + learning, "sampling": sampling if self.split
                 else states + sampling, "overlapped (async)": states + learning + sampling}[phase]
        largest = sorted(parts, key=lambda p: -getattr(self, p))[:3]
        lines = [f"memory plan: the {phase} phase needs {self.peak / GiB:.1f} GiB per device "
                 f"on mesh data={self.mesh[0]},fsdp={self.mesh[1]},tensor={self.mesh[2]}, more "
                 f"than the {budget / GiB:.1f} GiB budget (largest: " + ", ".join(
                     f"{p} {getattr(self, p) / GiB:.1f} GiB" for p in largest) + ")."]
        if alternatives:
            lines.append("Changes and their peaks per device:")
            lines += [f"  {change}: {plan.peak / GiB:.1f} GiB"
                      f"{' (fits)' if plan.peak <= budget else ''}"
                      for change, plan in alternatives]
        raise MemoryPlanError("\n".join(lines))


_ROWS = (("parameters, f32 masters (trained)", "masters", "both"),
         ("optimizer state (AdamW moments)", "optimizer", "both"),
         ("frozen parameters (LoRA base)", "frozen", "both"),
         ("reference model (KL)", "reference", "both"),
         ("gradients (f32, accumulated)", "gradients", "learner"),
         ("activations (one micro-batch)", "activations", "learner"),
         ("sampler's copy of the weights", "sampler_copy", "sampling"),
         ("weight snapshots (async)", "snapshots", "sampling"),
         ("KV cache", "kv_cache", "sampling"),
         ("KV cache, second copy (select, growth)", "kv_copy", "sampling"),
         ("sampler logits and work", "sampler_work", "sampling"),
         ("**resident in both**", "resident", ""),
         ("**peak, learner phase**", "learner_peak", ""),
         ("**peak, sampling phase**", "sampling_peak", ""),
         ("**peak**", "peak", ""))


def plans_table(plans: Sequence[tuple[str, MemoryPlan]]) -> str:
    """A markdown table of every part of each (column heading, plan), in GiB per device."""
    lines = ["| per device | " + " | ".join(h for h, _ in plans) + " | phase |",
             "|---|" + "---:|" * len(plans) + "---|"]
    lines += [f"| {name} | " + " | ".join(f"{getattr(p, field) / GiB:.2f}" for _, p in plans)
              + f" | {phase} |" for name, field, phase in _ROWS]
    return "\n".join(lines)


# ------------------------------------------------------------------ inputs


def parse_bytes(text: str) -> int:
    """'80GiB', '80GB', '512MiB', '1e9' -> bytes."""
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([KMGT]i?B|B)?\s*", text)
    if not match:
        raise ValueError(f"device memory {text!r}: a number with an optional unit "
                         "(B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)")
    unit = match.group(2) or "B"
    scale = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[unit[0]] if "i" not in unit else (
        1 << {"K": 10, "M": 20, "G": 30, "T": 40}[unit[0]])
    return int(float(match.group(1)) * scale)


def is_size(text: str) -> bool:
    """Whether `text` is a positive size `parse_bytes` reads (for flag validators)."""
    try:
        return parse_bytes(text) > 0
    except ValueError:
        return False


def parse_mesh(text: str) -> tuple[int, int, int]:
    """'data=1,fsdp=8,tensor=1' -> (1, 8, 1); axes left out are 1, one may be -1."""
    sizes = dict.fromkeys(MESH_AXES, 1)
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = item.partition("=")
        if name.strip() not in sizes or not re.fullmatch(r"-?\d+", value.strip()):
            raise ValueError(f"mesh {text!r}: comma-separated axis=size, axes {MESH_AXES}")
        sizes[name.strip()] = int(value)
    return tuple(sizes[a] for a in MESH_AXES)


def model_config_of(config: ml_collections.ConfigDict, *, preset: str = "",
                    model_dir: str | os.PathLike | None = None) -> ModelConfig:
    """The shape a run trains, without its weights: `preset` (a name in `models.config.PRESETS`),
    else the config's `model.preset`, else the config.json of `model_dir` (the checkpoint the run
    loads); with the run config's `model` dtypes and remat."""
    options = model_options(config.model)
    preset = preset or config.model.get("preset", "")
    if preset:
        if preset not in PRESETS:
            raise invalid("plan_memory", "preset", preset, f"not one of {sorted(PRESETS)}")
        base = PRESETS[preset]
    elif model_dir is not None and (Path(model_dir) / "config.json").is_file():
        base = config_from_hf(json.loads((Path(model_dir) / "config.json").read_text()))
    else:
        raise ValueError(f"config.model: no shape to plan with (path={config.model.path!r} "
                         f"holds no config.json here); name a preset, one of {sorted(PRESETS)}")
    return base.replace(
        param_dtype=options["dtype"], dtype=options["compute_dtype"] or options["dtype"],
        remat=options["remat"], attention_block=options["attention_block"],
        attention_impl=options["attention_impl"])


# ------------------------------------------------------------------ the plan


def episode_rows(plan: Plan, tasks_per_step: int) -> int:
    """The rows a step's episodes take, in the sampler and in the batch: every sample of every
    task, with the most branch rows each may bring (`BranchConfig.rows_per_episode`)."""
    return tasks_per_step * plan.rollout.group_size * plan.rollout.branch.rows_per_episode


def plan_memory(cfg: ModelConfig, plan: Plan, tasks_per_step: int, *,
                mesh: Sequence[int] = (1, 1, 1), processes: int = 1,
                backend: str = "gpu") -> MemoryPlan:
    """The memory plan of a run (module docstring): model `cfg`, run `plan`, `tasks_per_step`
    tasks over all processes, on a resolved (data, fsdp, tensor) `mesh`."""
    data, fsdp, tensor = mesh
    abstract = AbstractMesh((data, fsdp, tensor), MESH_AXES)
    learner = plan.learner
    cfg = cfg.replace(value_head=learner.term("value") is not None)
    rules = family_rules(cfg)
    state = abstract_state(cfg, learner)
    masters = tree_bytes(state.params, abstract, rules)
    storage = jnp.dtype(cfg.param_dtype)
    # The learner's rows: every episode and each counterfactual pair's chosen and rejected rows.
    episodes = episode_rows(plan, tasks_per_step)
    rows = episodes + 2 * plan.max_pairs * processes
    micro_rows = max(1, -(-rows // (learner.mini_batches * learner.micro_batches * data * fsdp)))
    # XLA on the CPU keeps every layer's internals whatever the policy (a jax.checkpoint'ed
    # function compiles to the same temp size there as a plain one): plan what it will hold.
    remat = "none" if backend == "cpu" else cfg.remat
    activations = activation_bytes(cfg, micro_rows, plan.row_length, tensor,
                                   learner.logprob_chunk, uses_fused_attention(cfg, backend),
                                   remat)
    schedule = plan.schedule
    split = schedule.sampler_devices > 0
    # a sampler mesh of its own splits the batch (its devices hold the weights whole), or for
    # the engine the model (`seetjax.rl.step_rollouts.sample_mesh`)
    n = schedule.sampler_devices
    ways, sampler_tensor = (((1, n) if plan.rollout.mode == "engine" else (n, 1)) if split
                            else (data * fsdp, tensor))
    kv, work, sampler_rows = _sampler_parts(cfg, plan, episodes // processes, ways,
                                            sampler_tensor)
    frozen = tree_bytes(state.frozen, abstract, rules)
    own = AbstractMesh((1, 1, sampler_tensor), MESH_AXES)  # read only where split
    sampling = (tree_bytes(state.params, own, rules) * storage.itemsize // 4
                + tree_bytes(state.frozen, own, rules)) if split else (
        masters * storage.itemsize // 4 + frozen)
    copies = schedule.lag(learner.mini_batches) + 1 if schedule.schedule == "async" else 0
    sampler_copy = sampling if split and not copies else (
        0 if copies or storage == jnp.float32 else masters * storage.itemsize // 4)
    return MemoryPlan(
        mesh=(data, fsdp, tensor), masters=masters,
        optimizer=tree_bytes(state.opt_state, abstract, rules), frozen=frozen,
        reference=tree_bytes(state.reference, abstract, rules) if state.reference else 0,
        sampler_copy=sampler_copy, gradients=masters, activations=activations, kv_cache=kv,
        kv_copy=kv, sampler_work=work,
        rows={"learner_rows_per_micro_batch_per_device": micro_rows,
              "row_width": plan.row_length, **sampler_rows},
        snapshots=copies * sampling, concurrent=bool(copies), split=split)


def _sampler_parts(cfg: ModelConfig, plan: Plan, episodes: int, batch_ways: int,
                   tensor: int) -> tuple[int, int, dict[str, int]]:
    """(KV cache, logits and work, rows and slots) of one device when the sampler holds this
    process's `episodes`: rows a power of two over the batch axes, slots for the longest
    episode plus a reply (`Sampler._padded_rows`, `Sampler._reserve`)."""
    rows = -(-bucket(episodes) // batch_ways)
    limits = plan.rollout.limits
    slots = bucket(limits.max_episode_tokens + bucket(limits.max_reply_tokens,
                                                      SAMPLER_MIN_STEPS), SAMPLER_MIN_SLOTS)
    kv = (2 * cfg.num_layers * rows * per_device(cfg.num_kv_heads, tensor) * cfg.head_dim
          * slots * jnp.dtype(cfg.dtype).itemsize)
    logits = rows * cfg.vocab_size * 4  # DecodeState.logits: rows split, vocab not
    chunk = prefill_chunk(cfg, rows * batch_ways, slots)
    work = max(prefill_bytes(cfg, rows, chunk, slots, tensor),
               decode_bytes(cfg, rows, slots, tensor))
    return kv, logits + work, {"sampler_rows_per_device": rows, "kv_slots": slots}


def alternatives(cfg: ModelConfig, plan: Plan, tasks_per_step: int, *,
                 mesh: tuple[int, int, int], processes: int = 1, backend: str = "gpu"
                 ) -> list[tuple[str, MemoryPlan]]:
    """The run's plan under single changes that lower memory (micro-batches, remat, LM-head
    chunk, fsdp size, tensor size, LoRA, tasks per step, episode length), each with the config
    field to set; only those that lower the peak."""
    learner, (data, fsdp, tensor) = plan.learner, mesh
    limits = plan.rollout.limits

    def with_learner(**fields: Any) -> Plan:
        return dataclasses.replace(plan, learner=dataclasses.replace(learner, **fields))

    options: list[tuple[str, ModelConfig, Plan, int, tuple[int, int, int]]] = []
    episodes = episode_rows(plan, tasks_per_step)
    if episodes % (2 * learner.micro_batches * learner.mini_batches * data * fsdp) == 0:
        m = 2 * learner.micro_batches
        options.append((f"learner.micro_batches={m}", cfg, with_learner(micro_batches=m),
                        tasks_per_step, mesh))
    if cfg.remat != "full":
        options.append(("model.remat='full'", cfg.replace(remat="full"), plan, tasks_per_step,
                        mesh))
    if not learner.logprob_chunk:
        options.append(("learner.logprob_chunk=1024", cfg, with_learner(logprob_chunk=1024),
                        tasks_per_step, mesh))
    options.append((f"learner.mesh.fsdp={2 * fsdp} ({2 * data * fsdp * tensor} devices)", cfg,
                    plan, tasks_per_step, (data, 2 * fsdp, tensor)))
    if cfg.num_kv_heads % (2 * tensor) == 0:
        options.append((f"learner.mesh.tensor={2 * tensor} ({2 * data * fsdp * tensor} devices)",
                        cfg, plan, tasks_per_step, (data, fsdp, 2 * tensor)))
    if learner.lora is None:
        options.append(("learner.lora.rank=16", cfg, with_learner(lora=LoRAConfig(rank=16)),
                        tasks_per_step, mesh))
    if tasks_per_step % (2 * processes) == 0:
        options.append((f"data.tasks_per_step={tasks_per_step // 2}", cfg, plan,
                        tasks_per_step // 2, mesh))
    shorter = dataclasses.replace(limits, max_episode_tokens=limits.max_episode_tokens // 2)
    options.append((f"limits.max_episode_tokens={shorter.max_episode_tokens}", cfg,
                    dataclasses.replace(plan, rollout=dataclasses.replace(plan.rollout,
                                                                          limits=shorter)),
                    tasks_per_step, mesh))
    base = plan_memory(cfg, plan, tasks_per_step, mesh=mesh, processes=processes,
                       backend=backend).peak
    out = []
    for change, c, p, tasks, m in options:
        other = plan_memory(c, p, tasks, mesh=m, processes=processes, backend=backend)
        if other.peak < base:
            out.append((change, other))
    return out


def device_budget() -> int | None:
    """The memory of this process's first device as its allocator reports it (`bytes_limit`:
    what a GPU gives XLA); None where it reports none (the CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}  # another process's: not addressable
    return int(stats["bytes_limit"]) if stats.get("bytes_limit") else None


def check_launch(config: ml_collections.ConfigDict, budget: int | None = None
                 ) -> MemoryPlan | None:
    """At a launch, before anything loads or compiles: the run's plan on this machine's devices
    and backend, refused (MemoryPlanError) when its peak passes `budget` bytes per device, by
    default what the device reports; None, checking nothing, where neither gives a budget."""
    budget = budget or device_budget()
    if not budget:
        return None
    plan = build_plan(config)
    model_dir = None if config.model.get("preset") else resolve_model_path(config.model.path)
    cfg = model_config_of(config, model_dir=model_dir)
    mesh = mesh_sizes(plan.learner.mesh, jax.device_count() - plan.schedule.sampler_devices)
    kw = dict(mesh=mesh, processes=jax.process_count(), backend=jax.default_backend())
    tasks = config.data.tasks_per_step
    memory = plan_memory(cfg, plan, tasks, **kw)
    if memory.peak > budget:
        memory.check(budget, alternatives(cfg, plan, tasks, **kw))
    return memory
