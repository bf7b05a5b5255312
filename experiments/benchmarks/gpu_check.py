"""`make gpu-check`: what must hold and be measured on a lent GPU (issue 42), from the repository
root, in two calls of 7 minutes each on one H100 (--budget-s, compilation included), which with
the machine's start fit a session's 15 minutes of device time:

    python3 experiments/benchmarks/gpu_check.py                  # the scaled run (default)
    python3 experiments/benchmarks/gpu_check.py --parts checks   # plan, MFU and tests, a second call
    .venv/bin/python experiments/benchmarks/gpu_check.py --cpu-dry-run --parts all  # here

Each part is a child process under its own time cap (and the budget left), in this order, so a
hang or a crash in one still leaves the others' figures:

  wheels     pip-installs the carried .whl/*.whl (fetch_gpu_wheels.sh) into /tmp/site
  scale      launch/train.py --config=configs/scale_1_5b.py for 2 RL steps (skipped if absent)
  plan       plan_check.py: the memory plan of configs/scale_1_5b.py against the compiled update,
             prefill and decode programs at its shapes (lowered from abstract states, not run),
             with the buffers live at each program's peak
  learner    bench_learner.py --preset qwen2.5-1.5b --dtype bfloat16 --no-torch: tokens/s, MFU
  shared     bench_learner.py --shared-prompts at that shape (8 x 2048, groups of 4 sharing a
             1,024-token prompt): the update sharing prefixes against computing every row
             (two 1.5B updates compile: ~90 s each, guessed from the scaled run's)
  tests      tests/learner, the tolerance rules (tests/test_tolerances.py), tests/models (the
             cuDNN kernel test among them) and tests/sampling, in that order, on --workers
  anatomy    anatomy.py at the sampler's and learner's settings: what the compiled decode step
             and update move (copies, cache updates in place or not, slots the attention reads,
             top ops by bytes) and the decode step timed apart (argmax, model alone, 4x slots)
  sampler    bench_sampler.py --decode-only: Qwen2.5-1.5B shape, bf16, batch 64, prompt 512,
             128 new; prefill and decode timed apart, decode against the HBM bound
  profile    the same with one more decode traced (bench_sampler.py --profile,
             kernel_profile.py): the device's busy share of the decode and its ops by time
  cublas     the same with XLA's Triton GEMMs off (cuBLAS for every matmul): are the dense
             layers' 64-row matmuls the loss? (CUDA graphs over the loop and XLA's dot merger,
             the two questions before, did not move the step: 2026-11-28)
  engine     bench_rollout.py --compare: the testbed's episodes played in lock step and through
             the serving engine (issue 43), with the embedded base model carried in .gpu_model/
             (`make gpu-model`), whose replies stop at different lengths: on 2 CPU cores every
             row a decode step holds costs compute and the engine lost (0.7-0.9x); on a GPU a
             step's cost hardly depends on its rows

--parts takes parts or the groups "figures" (wheels, scale), "checks" (wheels, plan, learner,
shared, tests), "decode" (wheels, anatomy, sampler, profile, cublas: the decode step's next questions),
"rollouts" (wheels, engine) and "all". The caps are
what the parts took on an H100 (2026-11-27, two sessions) with room: an RL step of the scaled run
compiling takes 185-199 s after ~100 s of start and evaluation, so two steps need the first call
alone; the plan check's prefill and decode compiled in 27 s there (its update never got its
turn); the test packages ran 172 tests in 267 s of 8 workers without finishing; the anatomy took
75 s and the decode benchmark 49 s.

One row per part goes to BENCHMARKS.md's "GPU check" table as soon as the part ends (device,
date, jax version, figures, status); the logs, the figures as JSON and BENCHMARKS.md go to $OUT
when it is set (the device machine's copy of the tree is not kept); the plan's JSON goes inside
gpu_check.json (its part's "data"), the 8 files the device tool brings back being taken.
--cpu-dry-run runs every part at tiny shapes on the CPU and writes its rows to a copy of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from kernel_profile import profile_text  # noqa: E402
from report import BENCHMARKS, add_row  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TITLE = "GPU check (make gpu-check, experiments/benchmarks/gpu_check.py)"
COLUMNS = ["date", "device", "jax", "part", "setting", "figures", "status"]
SITE = "/tmp/site"  # where the carried wheels go (docs of the device machine)
# The learner's tests and the tolerance rules first: on 2026-11-28 (12 workers, 384 s) the
# models' and sampling's all ended (186 passed, 3 skipped) and 44 of the learner's never started.
TESTS = ["tests/learner", "tests/test_tolerances.py", "tests/models", "tests/sampling"]
# Per-part caps in seconds on one H100 (first compilations included; twice these on the CPU under
# --cpu-dry-run); the budget caps them too. The update's plan check has not run on a GPU (its
# compilation there is guessed from the scaled run's first update, ~90 s with the step's work).
CAPS = {"wheels": 45, "scale": 400, "plan": 130, "learner": 80, "shared": 240, "tests": 420,
        "anatomy": 90, "sampler": 80, "profile": 90, "cublas": 80, "engine": 240}
# The embedded base model, copied here by `make gpu-model` and carried (git-ignored, 16 MB):
# building it on the device would spend the loan on its SFT.
GPU_MODEL = ROOT / ".gpu_model"
# The decode variants: bench_sampler under these XLA flags (not yet run on a GPU). Run before
# (BENCHMARKS.md, 2026-11-28), no gain: the loop in CUDA graphs
# (--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL --xla_gpu_graph_min_graph_size=1), 3.12
# against 3.11 ms a step; the dot merger at 256 MB, 3.25 ms.
XLA_VARIANTS = {"cublas": "--xla_gpu_enable_triton_gemm=false"}
# Two calls that fit one session's 15 minutes of device time with the machine's start: the
# scaled run alone, then the plan, the MFU and the tests (the budget cuts the tests first). The
# decode figures were measured twice alike (2026-11-27): rerun them after a change to decoding.
GROUPS = {"figures": ["wheels", "scale"],
          "checks": ["wheels", "plan", "learner", "shared", "tests"],
          "decode": ["wheels", "anatomy", "sampler", "profile", *XLA_VARIANTS],
          "rollouts": ["wheels", "engine"],
          "all": list(CAPS)}


def part_commands(dry: bool, workdir: Path, workers: int = 8) -> dict[str, tuple[list[str], str]]:
    """Each part's command and the setting its row names; tiny shapes under --cpu-dry-run;
    `workers` pytest processes share the GPU in the tests part."""
    py = sys.executable
    bench = "experiments/benchmarks"
    wheels = sorted(str(p) for p in (ROOT / ".whl").glob("*.whl"))
    pytest = [py, "-m", "pytest", "-p", "no:cacheprovider"]  # -q from pytest.ini
    sampler = ([py, f"{bench}/bench_sampler.py", "--decode-only", "--no-write", "--json",
                str(workdir / "sampler.json")]
               + (["--preset", "tiny-qwen2", "--dtype", "float32", "--batch", "2", "--prompt",
                   "16", "--new", "4", "--repeats", "1"] if dry else
                  ["--batch", "64", "--prompt", "512", "--new", "128", "--repeats", "3"]))
    learner = ([py, f"{bench}/bench_learner.py", "--no-torch", "--no-record", "--json",
                str(workdir / "learner.json")]
               + (["--preset", "tiny-qwen2", "--rows", "2", "--length", "64", "--rounds", "2"]
                  if dry else ["--preset", "qwen2.5-1.5b", "--dtype", "bfloat16", "--rounds", "5"]))
    shared = ([py, f"{bench}/bench_learner.py", "--shared-prompts", "--json",
               str(workdir / "shared.json")]
              + (["--preset", "tiny-qwen2", "--rows", "8", "--length", "64", "--rounds", "2"]
                 if dry else ["--preset", "qwen2.5-1.5b", "--dtype", "bfloat16", "--rows", "8",
                              "--length", "2048", "--rounds", "3"]))
    anatomy = ([py, f"{bench}/anatomy.py", "--json", str(workdir / "anatomy.json")]
               + (["--preset", "tiny-qwen2", "--dtype", "float32", "--batch", "2", "--prompt",
                   "8", "--new", "4", "--rows", "2", "--length", "32", "--repeats", "1",
                   "--budget-s", "100"] if dry else ["--budget-s", "70"]))
    profiled = [str(workdir / "profile.json") if a == str(workdir / "sampler.json") else a
                for a in sampler] + ["--profile"]
    config = "configs/scale_1_5b.py" + (":tiny" if dry else "")
    # the update first: the sampler's programs measured within the plan on an H100 (2026-11-27),
    # the update's temp is what the scaled run's peak points at (docs/scale.md)
    plan = [py, f"{bench}/plan_check.py", f"--config={config}", "--programs",
            "update,prefill,decode", "--json", str(workdir / "plan.json")]
    scale = [py, "launch/train.py", f"--config={config}", f"--workdir={workdir / 'scale'}",
             "--config.train.steps=2"]
    engine = [py, f"{bench}/bench_rollout.py", "--compare", "--no-write",
              "--config", "configs/testbed.py", "--model",
              "embedded:base" if dry else str(GPU_MODEL),
              *(["--tasks", "1", "--rounds", "1", "--warmup", "1"] if dry else
                ["--tasks", "8", "--rounds", "3", "--warmup", "2"])]
    return {
        "wheels": ([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", SITE, *wheels],
                   f"{len(wheels)} wheels from .whl/ into {SITE}"),
        "sampler": (sampler, " ".join(sampler[2:]).replace(str(workdir), "$TMP")),
        "profile": (profiled, " ".join(profiled[2:]).replace(str(workdir), "$TMP")),
        **{name: ([str(workdir / f"{name}.json") if a == str(workdir / "sampler.json") else a
                   for a in sampler], f"XLA_FLAGS={flags} " + " ".join(sampler[2:]).replace(
                       str(workdir / "sampler.json"), f"$TMP/{name}.json"))
           for name, flags in XLA_VARIANTS.items()},
        "learner": (learner, " ".join(learner[2:]).replace(str(workdir), "$TMP")),
        "shared": (shared, " ".join(shared[2:]).replace(str(workdir), "$TMP")),
        "anatomy": (anatomy, " ".join(anatomy[2:]).replace(str(workdir), "$TMP")),
        "plan": (plan, " ".join(plan[2:]).replace(str(workdir), "$TMP")),
        # Dry run: the packages' tests are collected, not run (hundreds of CPU compilations).
        # -v -v: a line per test as it ends, so a run cut off at its cap still tells what passed;
        # --durations: which tests the GPU's compilations make slow.
        "tests": ([*pytest, "-rfEs", *(["--collect-only"] if dry else
                                       ["-v", "-v", "--durations=25", "-n", str(workers)]),
                   *TESTS],
                  " ".join(TESTS) + (" (collected only: dry run)" if dry else f", -n {workers}")),
        "scale": (scale, " ".join(scale[2:]).replace(str(workdir), "$TMP")),
        "engine": (engine, " ".join(engine[2:]).replace(str(ROOT) + "/", "")),
    }


def child_env(dry: bool, workdir: Path) -> dict[str, str]:
    """The parts' environment: the platform named (tests/conftest.py defaults to the CPU), the
    wheels and the tree importable, unbuffered output, bench results kept out of runs/."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu" if dry else "cuda",
               SEETJAX_BENCH_RESULTS=str(workdir / "results.jsonl"))
    paths = [SITE] if (ROOT / ".whl").is_dir() and not dry else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(command: list[str], log: Path, env: dict[str, str], timeout: float) -> str:
    """Runs `command` in its own process group, output to `log`; 'ok', 'failed (rc N)' or
    'timed out after N s' (then the whole group is killed: pytest's workers, the trainer's)."""
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = process.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return f"timed out after {timeout:.0f} s"
    return "ok" if rc == 0 else f"failed (rc {rc})"


def pytest_figures(log: str) -> str:
    """'28 passed, 1 skipped in 40.1s; cuDNN test PASSED; FAILED a::b, ...' from pytest's log;
    without its summary (cut off), the outcomes its per-test lines (-v -v) give so far."""
    totals = re.findall(r"^=* ?(\d+ (?:passed|failed|skipped|errors?|tests? collected)\b.* in "
                        r"[\d.]+s)", log, re.M)
    outcomes = re.findall(r"^(?:\[gw\d+\] \[ *\d+%\] )?(PASSED|FAILED|SKIPPED|ERROR) (\S+)",
                          log, re.M)
    cudnn = [o for o, test in outcomes if "test_cudnn_attention" in test]
    failed = list(dict.fromkeys(t for o, t in outcomes if o in ("FAILED", "ERROR")))
    if totals:
        head = totals[-1]
    else:
        counts = {o: sum(1 for x, _ in outcomes if x == o) for o in ("PASSED", "FAILED", "SKIPPED")}
        head = "no summary; so far " + ", ".join(f"{n} {o.lower()}" for o, n in counts.items())
    return "; ".join([head, *([f"cuDNN test {cudnn[0]}"] if cudnn else []),
                      *([f"FAILED {', '.join(failed[:6])}"] if failed else [])])


def scale_figures(workdir: Path) -> str:
    """The RL steps done (rows with time/ figures in metrics.jsonl), each one's wall seconds, and
    the last one's timings, compile counts, memory and throughput."""
    path = workdir / "scale" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    steps = [r for r in rows if any(k.startswith("time/") for k in r)]
    if not steps:
        return "no RL step in metrics.jsonl"
    wanted = re.compile(r"^time/|^compile/|mfu|tokens_per_s|memory|live_gib")
    last = {k: v for k, v in steps[-1].items() if wanted.search(k) and isinstance(v, (int, float))}
    seconds = ", ".join(f"{sum(r.get(f'time/{k}_s', 0.0) for k in ('rollout', 'batch', 'learn')):.1f}"
                        for r in steps)
    return (f"{len(steps)} RL steps ({seconds} s of rollout + batch + update each, the first "
            f"compiling); step "
            f"{steps[-1]['step']}: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(last.items())))


def figures(name: str, log: Path, workdir: Path) -> str:
    text = log.read_text(errors="replace")
    if name == "tests":
        return pytest_figures(text)
    if name in ("sampler", "learner", "shared", "profile", *XLA_VARIANTS) and (
            workdir / f"{name}.json").exists():
        r = json.loads((workdir / f"{name}.json").read_text())
        if name == "learner":
            return (f"{r['tokens_per_s']:,.0f} tok/s, MFU {r['mfu_text']}; first update "
                    f"(compiling) {r['first_update_s']:.1f} s")
        if name == "shared":
            return (f"shared prefixes {r['tokens_per_s']:,.0f} tok/s, every row computed "
                    f"{r['unshared_tokens_per_s']:,.0f} tok/s ({r['ratio']}); "
                    f"{r['saved']:.0%} of the tokens not computed")
        traced = f"; {profile_text(r['profile'])}" if "profile" in r else ""
        return (f"prefill {r['prefill_tokens_per_s']:,.0f} prompt tok/s ({r['prefill_s']:.2f} s);"
                f" decode {r['decode_tokens_per_s']:,.0f} new tok/s; {r['roofline']}{traced}")
    if name in ("anatomy", "plan") and (workdir / f"{name}.json").exists():
        # Written after every section: a part cut off at its cap still has the ones it did.
        return json.loads((workdir / f"{name}.json").read_text()).get("headline", "-")
    if name == "scale":
        return scale_figures(workdir)
    if name == "engine":  # bench_rollout's summary line
        found = re.findall(r"^episodes/s: .*$", text, re.M)
        return found[-1][:400] if found else "-"
    return text.strip().splitlines()[-1][:200] if text.strip() else "-"


def part_data(name: str, workdir: Path) -> dict:
    """{"data": the plan's or the profile's JSON} for its part in gpu_check.json (no room for
    their files in $OUT), else {}."""
    path = workdir / f"{name}.json"
    return ({"data": json.loads(path.read_text())} if name in ("plan", "profile")
            and path.exists() else {})


def device_and_jax(env: dict[str, str]) -> tuple[str, str]:
    """jax.devices()[0].device_kind (and nvidia-smi's name if it differs) and jax's version, from
    a child process: this one never holds the GPU."""
    out = subprocess.run([sys.executable, "-c", "import jax; print(jax.__version__); "
                          "print(jax.devices()[0].device_kind)"], cwd=ROOT, capture_output=True,
                         text=True, env=env, timeout=120)
    lines = out.stdout.split("\n")
    version, kind = (lines[0], lines[1]) if out.returncode == 0 else ("?", "?")
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()
        if smi and smi[0] != kind:
            kind = f"{kind} ({smi[0]})"
    return kind, version


def skip_reason(name: str, dry: bool, left: float, budget: float) -> str | None:
    """Why part `name` does not run, or None."""
    if name == "wheels" and dry:
        return "dry run: the venv has the packages"
    if name == "wheels" and not list((ROOT / ".whl").glob("*.whl")):
        return "no .whl/*.whl (experiments/benchmarks/fetch_gpu_wheels.sh fetches them)"
    if name == "scale" and not (ROOT / "configs/scale_1_5b.py").exists():
        return "configs/scale_1_5b.py absent"
    if name == "engine" and not dry and not (GPU_MODEL / "config.json").exists():
        return "no .gpu_model/ (`make gpu-model` copies the embedded base model there)"
    if left < 20:
        return f"budget spent ({budget:.0f} s)"
    return None


def expand_parts(text: str) -> list[str]:
    """The parts that comma-separated parts and groups name, once each, in the order named."""
    unknown = set(text.split(",")) - set(CAPS) - set(GROUPS)
    if unknown:
        raise ValueError(f"--parts={text}: unknown {sorted(unknown)}; parts are {list(CAPS)}, "
                         f"groups {list(GROUPS)}")
    return list(dict.fromkeys(p for name in text.split(",") for p in GROUPS.get(name, [name])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="every part at tiny shapes on the CPU; rows to a copy of "
                             "BENCHMARKS.md")
    parser.add_argument("--budget-s", type=float, default=420, help="for all parts together")
    parser.add_argument("--workers", type=int, default=8,
                        help="pytest processes sharing the GPU in the tests part (16 cores there)")
    parser.add_argument("--parts", default="figures",
                        help=f"comma-separated parts {list(CAPS)} or groups {list(GROUPS)}")
    parser.add_argument("--benchmarks", type=Path, help=f"table to append to (default {BENCHMARKS}"
                        "; under --cpu-dry-run a copy of it in the work directory)")
    args = parser.parse_args()
    try:
        parts = expand_parts(args.parts)
    except ValueError as e:
        parser.error(str(e))
    dry, start = args.cpu_dry_run, time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    benchmarks = args.benchmarks or (workdir / "BENCHMARKS.md" if dry else BENCHMARKS)
    if dry and not args.benchmarks:
        shutil.copy(BENCHMARKS, benchmarks)
    env = child_env(dry, workdir)
    commands = part_commands(dry, workdir, args.workers)
    results: dict[str, dict] = {}
    device, version = None, None
    for name in parts:
        command, setting = commands[name]
        left = args.budget_s - (time.monotonic() - start)
        log = workdir / f"{name}.log"
        began = time.monotonic()
        skip = skip_reason(name, dry, left, args.budget_s)
        # pytest's workers share the GPU: each allocates as it needs, not 75% of it up front.
        part_env = dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false") if name == "tests" else env
        if name in XLA_VARIANTS and not dry:  # GPU flags: the CPU's XLA would not take them
            part_env = dict(env, XLA_FLAGS=" ".join(filter(None, [env.get("XLA_FLAGS"),
                                                                 XLA_VARIANTS[name]])))
        cap = CAPS[name] * (2 if dry else 1)
        status = f"skipped: {skip}" if skip else run(command, log, part_env, min(cap, left))
        seconds = time.monotonic() - began
        if device is None:  # after the wheels: jax may come from them
            device, version = device_and_jax(env)
        text = "-" if skip else figures(name, log, workdir)
        results[name] = {"status": status, "seconds": round(seconds, 1), "setting": setting,
                         "figures": text, "log_tail": log.read_text()[-2000:] if log.exists()
                         else "", **part_data(name, workdir)}
        print(f"[gpu-check] {name}: {status} in {seconds:.0f} s: {text}", flush=True)
        if name != "wheels" or not skip:
            add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), device or "?",
                                     version or "?", name, setting.replace("|", "/"),
                                     text.replace("|", "/"), f"{status}, {seconds:.0f} s"],
                    path=benchmarks)
    summary = {"device": device, "jax": version, "dry_run": dry, "benchmarks": str(benchmarks),
               "seconds": round(time.monotonic() - start, 1), "parts": results}
    (workdir / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    copy_out(workdir, benchmarks)
    print(f"[gpu-check] {summary['seconds']:.0f} s in all; rows in {benchmarks}; work {workdir}")


def copy_out(workdir: Path, benchmarks: Path) -> None:
    """Into $OUT (the device tool brings back at most 8 files): the check's JSON (each part's log
    tail in it), the anatomy's JSON, four logs, the scaled run's metrics.jsonl and BENCHMARKS.md."""
    out = os.environ.get("OUT")
    if not out:
        return
    files = [workdir / "gpu_check.json", workdir / "anatomy.json", benchmarks,
             workdir / "scale" / "metrics.jsonl",
             *(workdir / f"{name}.log" for name in ("tests", "sampler", "learner", "scale"))]
    for path in files:
        if path.exists():
            target = "scale_metrics.jsonl" if path.name == "metrics.jsonl" else path.name
            shutil.copy(path, Path(out) / target)


if __name__ == "__main__":
    main()
