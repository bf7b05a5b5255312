"""A run's memory per device, planned from its config before anything loads (seetjax.rl.memory_plan).

    python launch/plan.py --config=configs/qwen2_5_1_5b_seet.py --preset=qwen2.5-1.5b \
        --mesh=data=1,fsdp=8,tensor=1 --mesh=fsdp=16 --device_memory=80GiB

Prints parameters, f32 masters, optimizer state, gradients, the sampler's copy, the reference
model, the KV cache, activations and the peaks of the learner and sampling phases, per device.
Arithmetic, not allocation: a plan for 16 devices runs on a machine with one; each --mesh is a
column. With --device_memory, a plan that does not fit exits non-zero naming what to change, with
figures.
The shape comes from --preset, else the config's model.preset, else model.path's config.json.
"""

import math
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # shapes only: no accelerator is touched

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from seetjax.defaults.base_model import untrained_model_path  # noqa: E402
from seetjax.rl.config import build_plan  # noqa: E402
from seetjax.rl.memory_plan import (  # noqa: E402
    GiB,
    MemoryPlanError,
    alternatives,
    is_size,
    model_config_of,
    parse_bytes,
    parse_mesh,
    plan_memory,
    plans_table,
)
from seetjax.runtime.sharding import mesh_sizes

_CONFIG = config_flags.DEFINE_config_file("config", "configs/tiny.py", "Run config file.")
_MESH = flags.DEFINE_multi_string("mesh", [], "data=D,fsdp=F,tensor=T, one or more "
                                  "(default: the config's learner.mesh over --devices).")
_DEVICES = flags.DEFINE_integer("devices", 1, "Devices a -1 mesh axis spreads over.")
_MEMORY = flags.DEFINE_string("device_memory", "", "Memory per device, e.g. 80GiB: refuse a "
                              "plan that does not fit.")
_PRESET = flags.DEFINE_string("preset", "", "A model shape of seetjax.models.config.PRESETS.")
_BACKEND = flags.DEFINE_enum("backend", "gpu", ["gpu", "cpu"], "The backend planned for "
                             "(on a GPU, bf16 training attention runs cuDNN's fused kernel).")
_PROCESSES = flags.DEFINE_integer("processes", 1, "Processes the run's tasks are dealt over.")
flags.register_validator("mesh", lambda v: all(_parses(m) for m in v),
                         "--mesh: data=D,fsdp=F,tensor=T")
flags.register_validator("device_memory", lambda v: not v or is_size(v),
                         "--device_memory: a size such as 80GiB or 40GB")
flags.register_validator("devices", lambda v: v >= 1, "--devices must be >= 1")
flags.register_validator("processes", lambda v: v >= 1, "--processes must be >= 1")


def _parses(text: str) -> bool:
    try:
        return bool(parse_mesh(text))
    except ValueError:
        return False


def _mesh_sizes(config, text: str) -> tuple[int, int, int]:
    """--mesh's sizes, or the config's learner.mesh, a -1 resolved over --devices (less the
    sampler's own, `rollout.sampler_devices`)."""
    learner_mesh = config.learner.get("mesh", {})
    sizes = (parse_mesh(text) if text else
             (learner_mesh.get("data", -1), learner_mesh.get("fsdp", 1),
              learner_mesh.get("tensor", 1)))
    learners = _DEVICES.value - config.rollout.get("sampler_devices", 0)
    return mesh_sizes(sizes, learners if -1 in sizes else math.prod(sizes))


def main(argv):
    del argv
    config = _CONFIG.value
    placeholder = config.model.path is None  # the plan needs only the shape: a preset's
    if placeholder:
        config.model.path = ""
    tasks, kw = config.data.tasks_per_step, dict(processes=_PROCESSES.value,
                                                  backend=_BACKEND.value)
    try:
        plan = build_plan(config)
        named = _PRESET.value or config.model.get("preset") or placeholder
        # '', "embedded" and "embedded:base" name the embedded default (its base is its SFT:
        # the same shape, read without building it)
        cfg = model_config_of(config, preset=_PRESET.value,
                              model_dir=None if named else untrained_model_path(config.model.path))
        meshes = [_mesh_sizes(config, text) for text in _MESH.value or [""]]
        plans = [(mesh, plan_memory(cfg, plan, tasks, mesh=mesh, **kw)) for mesh in meshes]
    except ValueError as e:
        raise SystemExit(f"plan.py: {e}") from None
    print(f"model: {cfg.num_params() / 1e9:.2f}B parameters, {cfg.param_dtype} weights, "
          f"{cfg.dtype} compute, remat {cfg.remat}, LoRA "
          f"{plan.learner.lora.rank if plan.learner.lora else 'off'}; {tasks} tasks x "
          f"{plan.rollout.group_size} samples, rows of {plan.row_length} tokens")
    for mesh, memory in plans:
        print(f"{_label(mesh)}: " + ", ".join(f"{k} {v}" for k, v in memory.rows.items()))
    print(plans_table([(_label(mesh), memory) for mesh, memory in plans]))
    if not _MEMORY.value:
        return
    budget, refused = parse_bytes(_MEMORY.value), []
    for mesh, memory in plans:
        try:
            memory.check(budget, alternatives(cfg, plan, tasks, mesh=mesh, **kw))
            print(f"{_label(mesh)} fits: peak {memory.peak / GiB:.1f} of {budget / GiB:.1f} GiB")
        except MemoryPlanError as e:
            refused.append(str(e))
    if refused:
        raise SystemExit("plan.py: " + "\n".join(refused))


def _label(mesh: tuple[int, int, int]) -> str:
    return f"data={mesh[0]},fsdp={mesh[1]},tensor={mesh[2]}"


if __name__ == "__main__":
    app.run(main)
