"""Seconds per retrieval training step: the whole encoder vs its partial fine-tuning settings.

Each setting jits `make_train_step` for the default TrainConfig's batch (32 BFCL queries x 96
tokens, 64 tool docs x 128 tokens: positives and one BM25 hard negative each) on all-MiniLM-L6-v2
and runs the same real batches; rounds alternate the settings so machine load hits them alike.
Prints wall and process-CPU seconds per step (the medians over rounds), the load average, and from
the CPU seconds (wall seconds swing with other jobs' load; CPU seconds do much less) the speed-up
over the whole encoder and the steps that fit in --minutes on an idle machine, taken to run a step
in CPU seconds / CPUs of wall time (on an idle 2-core machine the whole encoder's 124 steps in
14.2 min matched that).

    python experiments/tool_retrieval/retrieval_step_time.py [--rounds 3 --steps 2 --minutes 14]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import jax

from seetjax.learner.state import new_train_state
from seetjax.retrieval.bfcl_tools import load_bfcl_tools, split_queries
from seetjax.retrieval.hf_encoder import minilm_dir
from seetjax.retrieval.sentence import SentenceEncoder
from seetjax.retrieval.train import (
    TrainConfig,
    batch_at,
    make_train_step,
    optimizer_for,
    split_encoder,
    training_pairs,
)

SETTINGS = {"full": {}, "frozen embeddings": {"freeze_embeddings": True},
            "top 4 layers": {"trainable_layers": 4}, "top 3 layers": {"trainable_layers": 3},
            "top 2 layers": {"trainable_layers": 2}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setting and round")
    parser.add_argument("--minutes", type=float, default=14.0)
    args = parser.parse_args()
    base = TrainConfig()
    data = load_bfcl_tools()
    split = split_queries(data)
    encoder = SentenceEncoder.from_dir(minilm_dir())
    pairs = training_pairs(encoder, data.docs, [(q.text, q.gold) for q in split.train], base,
                           split.held_out_docs)
    batches = [batch_at(pairs, base, s) for s in range(args.steps)]
    runs = {}
    for name, change in SETTINGS.items():
        cfg = dataclasses.replace(base, **change)
        graphdef, params, frozen = split_encoder(encoder.model, cfg)
        state = new_train_state(params, frozen, optimizer_for(cfg), keep_reference=False, seed=0)
        runs[name] = (make_train_step(graphdef, optimizer_for(cfg), cfg), state)
        start = time.perf_counter()
        jax.block_until_ready(runs[name][0](state, batches[0]))  # compile and warm up
        print(f"{name}: compiled and one step in {time.perf_counter() - start:.0f} s", flush=True)
    wall, cpu = {n: [] for n in runs}, {n: [] for n in runs}
    loads = []
    for r in range(args.rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            step, state = runs[name]
            w, c = time.perf_counter(), time.process_time()
            for batch in batches:  # each step from the same start: only the time matters
                jax.block_until_ready(step(state, batch))
            wall[name].append((time.perf_counter() - w) / args.steps)
            cpu[name].append((time.process_time() - c) / args.steps)
            loads.append(os.getloadavg()[0])
    cpus = os.cpu_count()
    full = statistics.median(cpu["full"])
    print(f"{cpus} CPUs, load average {min(loads):.1f}-{max(loads):.1f}; "
          f"median of {args.rounds} rounds x {args.steps} steps")
    print("| setting | wall s/step | CPU s/step | speed-up (CPU s) | steps in "
          f"{args.minutes:g} min, idle |\n|---|---|---|---|---|")
    for name in runs:
        c = statistics.median(cpu[name])
        print(f"| {name} | {statistics.median(wall[name]):.2f} | {c:.2f} | {full / c:.2f}x | "
              f"{int(60 * args.minutes * cpus / c)} |")


if __name__ == "__main__":
    main()
