"""The real multi-turn rollout loop: episodes/s, generated tokens/s and where the time goes.

Runs `seetjax.rollout.loop.Rollout` exactly as a training step does, with a run config's rollout
plan (default configs/tiny.py: its episode limits, prompt style, group size), its model
(`--model`, default the config's: the embedded default) sampling at temperature 1, and its
training tasks, `--tasks` per batch, SEET stage 3 (standard environment, retries). The first
batch compiles and is not timed; then `--rounds` batches, each of different tasks. Prints
and records the median rate, the split of wall time (sampling / environment / slow loop) and
the idle share of the lock-step batch (row-steps decoded for rows whose reply had ended).

There is no peer to run side by side (no other framework runs these SEET episodes), so the
row is an absolute rate on this machine, with its load.

With `--compare` the same batches are played in lock step (`RolloutConfig.mode="lockstep"`,
`SamplerPolicy`) and through the serving engine (`mode="engine"`, `EnginePolicy`: episodes
advance independently, issue 43), alternating which goes first: episodes/s of each, the speed-up
and decoding's idle share of each (engine: its chunk is the config's decode_chunk, its rows all
the batch's episodes; its idle share counts every row a chunk computes, padding rows too, lock
step's the rows of each call), the programs each mode compiled during the timed batches
(shapes the warm-up batch did not meet), and the rates without the seconds spent compiling
them (jax's compile events: a training run compiles each shape once). `--max-reply-tokens N`
is the long-reply setting: replies up to N tokens, turns up to 3N, episodes up to max(the
config's cap, 4N + 1024).

With `--learner` the timed batches become the learner's input instead, as a training step builds
it (`trajectory_batch`: the run's row length and counterfactual pairs), and the run config's
learner update is timed on them packed sharing prefixes (`learner.share_prefixes`), packed with
every row alone (`learner.pack_rows`) and with one episode per row, in alternating rounds: useful
(non-padding) tokens/s of each, the share of the real tokens sharing left uncomputed, the padding
share of the rows the model runs over, and the largest first-update loss difference. With
`--pairs` as well, the update with the counterfactual pairs laid in the trajectories' packed
rows (`learner.pairs_with_trajectories`) against pairs packed in rows of their own.

With `--branch` the rollouts branch as the ablation's `branch` variant does (2 copies at each of
an episode's first 2 calls that ran, `rollout.branch`); `--branch-compare` plays the same tasks
plain and branching, alternating: generated tokens/s of each (every sampled token, branches'
included) and seconds per generated token, which a fork that copies its parent's KV-cache row
keeps near the plain rollout's (issue 44: a fork costs only its new tokens).

    python experiments/benchmarks/bench_rollout.py [--config configs/tiny.py --tasks 8]
    python experiments/benchmarks/bench_rollout.py --learner --tasks 2 --rounds 3 [--branch]
    python experiments/benchmarks/bench_rollout.py --learner --pairs --config configs/testbed.py
    python experiments/benchmarks/bench_rollout.py --branch-compare --config configs/testbed.py
    python experiments/benchmarks/bench_rollout.py --compare --model embedded:base \
        [--max-reply-tokens 256]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

TITLE = "Rollouts: the multi-turn SEET loop on a run config (bench_rollout.py)"
COLUMNS = ["date", "machine", "setting", "episodes/s", "generated tok/s", "sampling share",
           "environment share", "slow-loop share", "idle share of decoding"]
LEARNER_TITLE = ("Learner on rollout batches: shared prefixes, packed rows, one episode per row "
                 "(bench_rollout.py --learner)")
LEARNER_COLUMNS = ["date", "machine", "setting", "shared-prefix useful tok/s",
                   "packed useful tok/s", "one-per-row useful tok/s",
                   "speed-up shared / packed, packed / one per row", "tokens not computed",
                   "padding share shared / packed / one per row", "first-update loss difference"]
PAIRS_TITLE = ("Learner: counterfactual pairs with the trajectories vs apart "
               "(bench_rollout.py --learner --pairs)")
PAIRS_COLUMNS = ["date", "machine", "setting", "pairs with trajectories useful tok/s",
                 "pairs apart useful tok/s", "speed-up", "records per batch",
                 "first-pass loss difference"]
BRANCH_TITLE = "Rollouts: plain vs branching (bench_rollout.py --branch-compare)"
BRANCH_COLUMNS = ["date", "machine", "setting", "plain generated tok/s",
                  "branching generated tok/s", "ms per generated token plain / branching",
                  "cost per token, branching / plain", "rows per batch plain / branching"]
COMPARE_TITLE = "Rollouts: lock step vs the engine (bench_rollout.py --compare)"
COMPARE_COLUMNS = ["date", "machine", "setting", "lock-step episodes/s", "engine episodes/s",
                   "speed-up", "idle share of decoding lock step / engine"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--model", default="",
                        help="HF directory or embedded:base ('': the config's model)")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per batch (x group size)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1,
                        help="--compare: untimed batches per mode first (shapes compiled)")
    parser.add_argument("--threads", type=int, default=0, help="CPUs (0: all)")
    parser.add_argument("--learner", action="store_true",
                        help="time the learner's update on the batches, packed vs one per row")
    parser.add_argument("--pairs", action="store_true",
                        help="with --learner: the pairs with the trajectories vs apart")
    parser.add_argument("--compare", action="store_true",
                        help="lock step vs the engine on the same batches, side by side")
    parser.add_argument("--max-reply-tokens", type=int, default=0,
                        help="the long-reply setting: this reply cap (0: the config's limits)")
    parser.add_argument("--branch", action="store_true",
                        help="branching rollouts (2 copies at each episode's first 2 calls)")
    parser.add_argument("--branch-compare", action="store_true",
                        help="plain vs branching rollouts on the same tasks, side by side")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    cpus = pin_threads(args.threads)

    import jax
    from flax import nnx

    from seetjax.config.sections import load_config_file
    from seetjax.defaults.base_model import resolve_model_path
    from seetjax.envs import registry
    from seetjax.models.hf import load_hf_checkpoint
    from seetjax.models.tokenizer import Tokenizer
    from seetjax.rl.config import build_plan
    from seetjax.rollout.branching import BranchConfig
    from seetjax.rollout.loop import Rollout
    from seetjax.rollout.policy import SamplerPolicy
    from seetjax.sampling import Sampler
    from seetjax.seet.config import default_stages

    config = load_config_file(args.config)
    plan = build_plan(config)
    if args.max_reply_tokens:
        limits = plan.rollout.limits
        plan = dataclasses.replace(plan, rollout=dataclasses.replace(
            plan.rollout, limits=dataclasses.replace(
                limits, max_reply_tokens=args.max_reply_tokens,
                max_turn_tokens=3 * args.max_reply_tokens,
                max_episode_tokens=max(limits.max_episode_tokens,
                                       4 * args.max_reply_tokens + 1024))))
    branching = dataclasses.replace(plan.rollout, branch=BranchConfig(
        points="every_call", k=2, max_forks=2))
    if args.branch:
        plan = dataclasses.replace(plan, rollout=branching)
    model_dir = resolve_model_path(args.model or config.model.path)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    model = load_hf_checkpoint(model_dir)
    env = plan.rollout.env
    tasks = registry.spec_of(env).load_tasks(env, config.data.to_dict(), config.data.split,
                                             config.data.tasks_per_category or None)
    batches = args.rounds + max(1, args.warmup if args.compare else 1)
    needed = args.tasks * batches
    if len(tasks) < needed:
        raise SystemExit(f"--tasks={args.tasks} x {batches} batches needs {needed} "
                         f"tasks; the config's split has {len(tasks)}")
    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    rollout = Rollout(tokenizer, plan.rollout)
    stage = default_stages()[2]

    def batch(i: int):
        policy = SamplerPolicy(sampler, nnx.state(model), plan.sampling, tokenizer.stop_ids,
                               jax.random.key(i))
        start = time.perf_counter()
        result = rollout(tasks[i * args.tasks:(i + 1) * args.tasks], policy, stage,
                         progress=0.5, step=i, seed=i)
        return time.perf_counter() - start, result

    if args.compare:
        compare(args, plan, model, tokenizer, sampler, tasks, stage, model_dir, len(cpus))
        return
    if args.branch_compare:
        branch_compare(args, plan, branching, model, tokenizer, sampler, tasks, stage, model_dir,
                       len(cpus))
        return
    batch(0)  # compiles
    seconds, results = zip(*(batch(i + 1) for i in range(args.rounds)))
    episodes = [len(r.episodes) for r in results]
    tokens = [r.times.reply_tokens for r in results]
    share = {k: statistics.median(getattr(r.times, k) / s for r, s in zip(results, seconds))
             for k in ("sampling_s", "environment_s", "slow_loop_s")}
    idle = statistics.median(r.times.metrics()["idle_share"] for r in results)
    rates = {"episodes": summary(seconds, episodes), "tokens": summary(seconds, tokens)}
    print(f"{rates['episodes']} episodes/s, {rates['tokens']} generated tokens/s; time: "
          f"sampling {share['sampling_s']:.0%}, environment {share['environment_s']:.0%}, "
          f"slow loop {share['slow_loop_s']:.0%}; idle share of decoding {idle:.0%}")
    setting = (f"{played(args, plan, model_dir)}, decode_chunk {plan.rollout.decode_chunk}, "
               f"{len(cpus)} threads, median of {args.rounds} batches, load {load():.1f}")
    if args.learner:
        (pairs_on if args.pairs else learner_on)(results, plan, model, tokenizer.pad_id, setting,
                                                 args)
        return
    record("rollout loop", setting, rates, "-")
    if not args.no_write:
        add_row(TITLE, COLUMNS, [
            datetime.date.today().isoformat(), cpu_machine(), setting,
            f"{rates['episodes'].rate:.2f}", f"{rates['tokens'].rate:,.0f}",
            f"{share['sampling_s']:.0%}", f"{share['environment_s']:.0%}",
            f"{share['slow_loop_s']:.0%}", f"{idle:.0%}"])


def played(args, plan, model_dir) -> str:
    """What the rollouts played: the config, model, tasks and samples, stage and temperature."""
    return (f"{args.config}, {os.path.basename(str(model_dir))} model, {args.tasks} tasks x "
            f"{plan.rollout.group_size} samples, stage 3, T={plan.sampling.temperature}")


def compare(args, plan, model, tokenizer, sampler, tasks, stage, model_dir, threads: int) -> None:
    """The same batches played in lock step and through the engine, alternating (module
    docstring)."""
    import jax
    from flax import nnx

    from seetjax.rollout.loop import Rollout
    from seetjax.rollout.policy import SamplerPolicy
    from seetjax.serving.engine import Engine
    from seetjax.serving.rollout_policy import EnginePolicy

    rows = args.tasks * plan.rollout.group_size
    chunk = plan.rollout.decode_chunk or 16
    engine = Engine(model, tokenizer, sampler=sampler, max_batch=rows, max_queue=rows,
                    chunk_steps=chunk).start()
    modes = ("lockstep", "engine")
    rollouts = {m: Rollout(tokenizer, dataclasses.replace(plan.rollout, mode=m)) for m in modes}

    compiled = {m: 0 for m in modes}  # programs compiled during the timed batches
    by_program: dict[str, int] = {}  # the engine's, by jitted function
    compiling = [0.0]  # seconds spent tracing, lowering and compiling programs so far
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiling.__setitem__(0, compiling[0] + seconds)
        if event.startswith("/jax/core/compile/") else None)

    def batch(mode: str, i: int):
        policy = (EnginePolicy(engine, plan.sampling, i) if mode == "engine" else
                  SamplerPolicy(sampler, nnx.state(model), plan.sampling, tokenizer.stop_ids,
                                jax.random.key(i)))
        programs, compiled_s = engine.compile_counts(), compiling[0]  # the sampler's included
        start = time.perf_counter()
        result = rollouts[mode](tasks[i * args.tasks:(i + 1) * args.tasks], policy, stage,
                                progress=0.5, step=i, seed=i)
        seconds = time.perf_counter() - start
        for name, n in engine.compile_counts().items():
            compiled[mode] += n - programs[name]
            if mode == "engine":
                by_program[name] = by_program.get(name, 0) + n - programs[name]
        return seconds, result, compiling[0] - compiled_s

    for i in range(args.warmup):
        for mode in modes:
            batch(mode, args.rounds + i if i else 0)  # compiles; not the timed batches' tasks
    compiled.update({m: 0 for m in modes})
    by_program.clear()
    runs: dict[str, list] = {m: [] for m in modes}
    for i in range(args.rounds):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            runs[mode].append(batch(mode, i + 1))
    engine.stop()
    rates = {m: summary([s for s, _, _ in runs[m]], [len(r.episodes) for _, r, _ in runs[m]])
             for m in modes}
    # A training run compiles each shape once (and keeps it in the persistent cache): the
    # same batches without the seconds spent compiling shapes the warm-up did not meet.
    steady = {m: summary([s - c for s, _, c in runs[m]], [len(r.episodes) for _, r, _ in runs[m]])
              for m in modes}
    idle = {m: statistics.median(r.times.metrics()["idle_share"] for _, r, _ in runs[m])
            for m in modes}
    ratio = f"{rates['engine'].rate / rates['lockstep'].rate:.2f}x"
    paired = ", ".join(f"{a / b:.2f}x" for (a, *_), (b, *_) in zip(runs["lockstep"],
                                                                   runs["engine"]))
    ratio += f" (batches: {paired})"  # the same tasks in both modes: each batch's own speed-up
    ratio += (f"; without compiling {steady['engine'].rate / steady['lockstep'].rate:.2f}x ("
              f"{steady['lockstep'].rate:.2f} / {steady['engine'].rate:.2f} episodes/s; "
              f"compiling {sum(c for *_, c in runs['lockstep']):.1f} / "
              f"{sum(c for *_, c in runs['engine']):.1f} s)")
    tokens = {m: statistics.median(r.times.reply_tokens / s for s, r, _ in runs[m])
              for m in modes}
    print(f"episodes/s: lock step {rates['lockstep'].rate:.2f}, engine "
          f"{rates['engine'].rate:.2f} ({ratio}); generated tok/s {tokens['lockstep']:,.0f} / "
          f"{tokens['engine']:,.0f}; idle share of decoding {idle['lockstep']:.0%} / "
          f"{idle['engine']:.0%}; programs compiled while timed {compiled['lockstep']} / "
          f"{compiled['engine']} (engine: "
          + ", ".join(f"{k} {n}" for k, n in sorted(by_program.items(), key=lambda x: -x[1])
                      if n) + ")")
    limits = plan.rollout.limits
    setting = (f"{played(args, plan, model_dir)}, replies <= {limits.max_reply_tokens} tokens, "
               f"chunk {chunk}, {threads} threads, "
               f"{args.warmup} warm-up batch(es), median of {args.rounds} alternating batches, "
               f"programs compiled while timed "
               f"{compiled['lockstep']} / {compiled['engine']}, load {load():.1f}")
    record("rollout: lock step vs engine", setting, rates, ratio)
    if not args.no_write:
        add_row(COMPARE_TITLE, COMPARE_COLUMNS, [
            datetime.date.today().isoformat(), cpu_machine(), setting,
            f"{rates['lockstep'].rate:.2f}", f"{rates['engine'].rate:.2f}", ratio,
            f"{idle['lockstep']:.0%} / {idle['engine']:.0%}"])


# pairs apart in every setting, so that "shared prefixes" measures the sharing of trajectories
# alone, as in the rows before pairs rode with them (`--pairs` measures that)
LEARNER_SETTINGS = {"shared prefixes": dict(pack_rows=True, share_prefixes=True,
                                            pairs_with_trajectories=False),
                    "packed": dict(pack_rows=True, share_prefixes=False),
                    "one per row": dict(pack_rows=False)}
PAIR_SETTINGS = {"with": dict(pack_rows=True, share_prefixes=True, pairs_with_trajectories=True),
                 "apart": dict(pack_rows=True, share_prefixes=True,
                               pairs_with_trajectories=False)}


def branch_compare(args, plan, branching, model, tokenizer, sampler, tasks, stage, model_dir,
                   threads: int) -> None:
    """The same tasks played plain and branching, alternating (module docstring)."""
    import jax
    from flax import nnx

    from seetjax.rollout.loop import Rollout
    from seetjax.rollout.policy import SamplerPolicy

    rollouts = {"plain": Rollout(tokenizer, plan.rollout), "branching": Rollout(tokenizer,
                                                                                branching)}

    def batch(mode: str, i: int):
        policy = SamplerPolicy(sampler, nnx.state(model), plan.sampling, tokenizer.stop_ids,
                               jax.random.key(i))
        start = time.perf_counter()
        result = rollouts[mode](tasks[i * args.tasks:(i + 1) * args.tasks], policy, stage,
                                progress=0.5, step=i, seed=i)
        return time.perf_counter() - start, result

    for mode in rollouts:
        batch(mode, 0)  # compiles
    runs: dict[str, list] = {m: [] for m in rollouts}
    for i in range(args.rounds):
        for mode in list(rollouts) if i % 2 == 0 else list(rollouts)[::-1]:
            runs[mode].append(batch(mode, i + 1))
    rates = {m: summary([s for s, _ in runs[m]], [r.times.reply_tokens for _, r in runs[m]])
             for m in rollouts}
    rows = {m: statistics.mean(len(r.episodes) for _, r in runs[m]) for m in rollouts}
    per_token = {m: 1e3 / rates[m].rate for m in rollouts}
    ratio = f"{per_token['branching'] / per_token['plain']:.2f}x"
    print(f"generated tok/s: plain {rates['plain']}, branching {rates['branching']}; ms per "
          f"generated token {per_token['plain']:.2f} / {per_token['branching']:.2f} ({ratio}); "
          f"rows per batch {rows['plain']:.0f} / {rows['branching']:.0f}")
    setting = (f"{played(args, plan, model_dir)}, branching every_call, k=2, 2 forks, "
               f"{threads} threads, median of {args.rounds} alternating batches, "
               f"load {load():.1f}")
    record("rollout: plain vs branching", setting, rates, ratio)
    if not args.no_write:
        add_row(BRANCH_TITLE, BRANCH_COLUMNS, [
            datetime.date.today().isoformat(), cpu_machine(), setting, str(rates["plain"]),
            str(rates["branching"]), f"{per_token['plain']:.2f} / {per_token['branching']:.2f}",
            ratio, f"{rows['plain']:.0f} / {rows['branching']:.0f}"])


def timed_updates(settings: dict, results, plan, model, pad_id: int, args):
    """The run config's learner update, with each of `settings`' fields, over the rollout
    batches as a training step builds them, in alternating rounds after a first untimed pass
    (which compiles every batch's shapes): {name: rate summary} of useful (real) tokens/s and
    {name: that pass's metrics}."""
    from seetjax.learner import create_learner
    from seetjax.rollout.batching import trajectory_batch

    runs, firsts = {}, {}
    rows_per_episode = plan.rollout.branch.rows_per_episode
    for name, fields in settings.items():
        learner, state = create_learner(model, dataclasses.replace(plan.learner, **fields))
        batches = [trajectory_batch(r, pad_id=pad_id, row_multiple=learner.batch_divisor,
                                    length=plan.row_length, max_pairs=plan.max_pairs or None,
                                    pair_seed=(0, i, 0), rows_per_episode=rows_per_episode)
                   for i, r in enumerate(results)]
        box = {"state": state}

        def run(learner=learner, batches=batches, box=box) -> list[dict]:
            out = []
            for batch in batches:
                box["state"], metrics = learner.update(box["state"], batch)
                out.append(metrics)
            return out

        runs[name], firsts[name] = run, run()
    tokens = sum(m["tokens"] for m in firsts[next(iter(settings))])
    times = alternate(runs, args.rounds, warmup=0)
    return {name: summary(t, tokens) for name, t in times.items()}, firsts


def learner_setting(plan, results, rollout_setting: str, args) -> str:
    cfg = plan.learner
    branch = plan.rollout.branch
    return (f"{rollout_setting.split(', stage 3')[0]}"
            + (f", branching ({branch.points}, k={branch.k}, {branch.max_forks} forks)"
               if branch.points != "none" else "")
            + f": {len(results)} rollout batches as training steps build them "
            f"({plan.row_length}-token rows, {cfg.micro_batches} micro-batches, "
            f"{plan.max_pairs} pairs), the config's update ({cfg.advantage} + "
            f"{', '.join(t.name for t in cfg.losses)}), median of {args.rounds} alternating "
            f"rounds, load {load():.1f}")


def pairs_on(results, plan, model, pad_id: int, rollout_setting: str, args) -> None:
    """The update with the counterfactual pairs laid in the trajectories' packed rows
    (`learner.pairs_with_trajectories`) against pairs packed in rows of their own."""
    records = [len(r.records) for r in results]
    rates, firsts = timed_updates(PAIR_SETTINGS, results, plan, model, pad_id, args)
    ratio = f"{rates['with'].rate / rates['apart'].rate:.2f}x"
    gap = max(abs(a["loss"] - b["loss"]) for a, b in zip(firsts["with"], firsts["apart"]))
    print(f"useful tokens/s: pairs with the trajectories {rates['with']}, apart "
          f"{rates['apart']} ({ratio}); records per batch {records}; largest first-pass loss "
          f"difference {gap:.1e}")
    learner_row("learner: pairs with the trajectories vs apart", PAIRS_TITLE, PAIRS_COLUMNS,
                learner_setting(plan, results, rollout_setting, args), rates, ratio, args,
                [str(rates["with"]), str(rates["apart"]), ratio, " ".join(map(str, records)),
                 f"{gap:.1e}"])


def learner_on(results, plan, model, pad_id: int, rollout_setting: str, args) -> None:
    """The run config's learner update over the rollout batches: packed sharing prefixes, packed
    rows alone, one per row (`LEARNER_SETTINGS`), in alternating rounds."""
    rates, firsts = timed_updates(LEARNER_SETTINGS, results, plan, model, pad_id, args)
    mean = lambda name, key: statistics.mean(m[key] for m in firsts[name])  # noqa: E731
    saved = mean("shared prefixes", "shared_prefix_share")
    padding = " / ".join(f"{mean(name, 'padding_share'):.0%}" for name in LEARNER_SETTINGS)
    gap = max(abs(firsts[name][0]["loss"] - firsts["one per row"][0]["loss"])
              for name in LEARNER_SETTINGS)
    ratio = (f"{rates['shared prefixes'].rate / rates['packed'].rate:.2f}x / "
             f"{rates['packed'].rate / rates['one per row'].rate:.2f}x")
    print(f"useful tokens/s: shared prefixes {rates['shared prefixes']}, packed "
          f"{rates['packed']}, one per row {rates['one per row']} (shared / packed, packed / one "
          f"per row: {ratio}); tokens not computed {saved:.0%}; padding share {padding}; "
          f"first-update loss difference {gap:.1e}")
    learner_row("learner on rollout batches", LEARNER_TITLE, LEARNER_COLUMNS,
                learner_setting(plan, results, rollout_setting, args), rates, ratio, args,
                [*(str(rates[name]) for name in LEARNER_SETTINGS), ratio, f"{saved:.0%}",
                 padding, f"{gap:.1e}"])


def learner_row(label: str, title: str, columns: list[str], setting: str, rates: dict,
                ratio: str, args, cells: list[str]) -> None:
    """Records a learner comparison and, unless --no-write, adds its row to BENCHMARKS.md."""
    record(label, setting, rates, ratio)
    if not args.no_write:
        add_row(title, columns, [datetime.date.today().isoformat(), cpu_machine(), setting,
                                 *cells])


if __name__ == "__main__":
    main()
