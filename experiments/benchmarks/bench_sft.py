"""SFT throughput on real agent dialogs: seetjax (packed and padded rows) vs a PyTorch SFT step.

The embedded model and tokenizer, BFCL train dialogs (compact prompts, ground truth replayed for
real tool results) formatted to at most --length tokens. seetjax trains on the SFT pipeline's
batches of static shape [rows, length]: packed (several dialogs per row, segment-masked attention)
and padded (one dialog per row). The PyTorch peer (transformers Qwen2, masked cross-entropy,
global-norm clipping, AdamW: what TRL's SFT trainer does per step) trains on the padded batches'
dialogs, each batch padded only to its longest dialog (dynamic padding, as collators do). All
three run pinned to the same `--threads` CPUs; rounds alternate between them so machine load hits
all alike; throughput is the median per-round rate of dialog tokens (padding excluded), with its
spread. The first padded update's loss is compared with PyTorch's
on the same batch and weights as a check that both compute the same objective.

    python experiments/benchmarks/bench_sft.py [--rows 4 --length 2048 --rounds 5 --threads 2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import jax
import numpy as np

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.formatter import format_dialogs
from seetjax.data.pipeline import PipelineConfig, SFTPipeline
from seetjax.defaults.embedded import embedded_model_dir
from seetjax.learner import create_learner, learner_config
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402
from torch_peer import optimizer_step, torch_model_and_optimizer  # noqa: E402

TITLE = "SFT: agent dialogs, seetjax packed / padded vs PyTorch (bench_sft.py)"
COLUMNS = ["date", "machine", "setting", "seetjax packed tok/s", "seetjax padded tok/s",
           "pytorch tok/s", "packed / pytorch", "row fill packed / padded",
           "first-update loss difference"]
LR, MAX_NORM = 1e-4, 1.0


def batches(examples, rows: int, length: int, packing: bool, count: int, pad_id: int) -> list:
    config = PipelineConfig(seq_len=length, batch_size=rows, packing=packing, pad_id=pad_id)
    iterator = iter(SFTPipeline(examples, config, process_index=0, process_count=1))
    return [next(iterator) for _ in range(count)]


def seetjax_update(model, data: list):
    # the pipeline's rows as they come (packed or padded), not repacked by the learner
    learner, state = create_learner(model, learner_config(
        {"algorithm": "sft", "optimizer": {"learning_rate": LR, "max_grad_norm": MAX_NORM},
         "pack_rows": False}), mesh=None)
    box = {"state": state}

    def run(i: int) -> dict:
        b = data[i]
        seqs = TokenSequences(tokens=b["tokens"], positions=b["positions"],
                              segment_ids=b["segment_ids"], loss_mask=b["loss_mask"])
        box["state"], metrics = learner.update(box["state"], TrajectoryBatch(sequences=seqs))
        return metrics

    return run


def pytorch_sft_update(hf_dir: str, padded: list):
    import torch

    model, optimizer = torch_model_and_optimizer(hf_dir, LR)
    data = []
    for b in padded:  # the same dialogs, each batch padded to its longest only
        width = int((b["segment_ids"] > 0).sum(1).max())
        data.append(tuple(torch.from_numpy(np.ascontiguousarray(x[:, :width])) for x in (
            b["tokens"], (b["segment_ids"] > 0).astype(np.int64), b["loss_mask"])))

    def run(i: int) -> dict:
        tokens, attention, mask = data[i]
        logits = model(input_ids=tokens.long(), attention_mask=attention).logits[:, :-1].float()
        nll = torch.logsumexp(logits, -1) - logits.gather(-1, tokens[:, 1:, None].long())[..., 0]
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        return optimizer_step(model, optimizer, loss, MAX_NORM)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="CPUs for both sides (0: all)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()

    cpus = pin_threads(args.threads)
    path = embedded_model_dir()
    tokenizer = Tokenizer.from_pretrained(path)
    dialogs, _ = bfcl_dialogs("train", prompt_style="compact")
    examples, report = format_dialogs(dialogs, tokenizer, args.length, truncate=True)
    start = time.perf_counter()
    count = args.rounds + 1
    packed = batches(examples, args.rows, args.length, True, count, tokenizer.pad_id)
    padded = batches(examples, args.rows, args.length, False, count, tokenizer.pad_id)
    pipeline_ms = (time.perf_counter() - start) / (2 * count) * 1e3
    print(f"{report.formatted} dialogs ({len(report.truncated)} truncated to {args.length}); "
          f"the pipeline makes a batch in {pipeline_ms:.1f} ms")
    runners = {"packed": seetjax_update(load_hf_checkpoint(path), packed),
               "padded": seetjax_update(load_hf_checkpoint(path), padded)}
    data = {"packed": packed, "padded": padded}
    if not args.no_torch:
        runners["pytorch"] = pytorch_sft_update(str(path), padded)
        data["pytorch"] = padded
    # First updates (compilation / warm-up) on batch 0, the loss check on the padded batch.
    first = {name: run(0)["loss"] for name, run in runners.items()}
    difference = abs(first["padded"] - first["pytorch"]) if "pytorch" in first else None
    print("first update loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    # Every timed batch once, untimed: seetjax compiles one program per row shape and LM-head
    # width (`learner.target_logits`), as a training run does in its first steps.
    for run in runners.values():
        for i in range(1, count):
            run(i)

    def cycled(name: str):  # each call trains on the next batch: 1, 2, ...
        batch = iter(range(1, count))
        return lambda: runners[name](next(batch))

    times = alternate({name: cycled(name) for name in runners}, args.rounds, warmup=0)
    rates = {name: summary(times[name], [int((data[name][i]["segment_ids"] > 0).sum())
                                         for i in range(1, count)]) for name in runners}
    rate = {name: r.rate for name, r in rates.items()}
    fill = {name: float(np.mean([(b["segment_ids"] > 0).mean() for b in data[name][1:]]))
            for name in ("packed", "padded")}
    for name in runners:
        print(f"{name}: {rates[name]} dialog tokens/s")
    setting = (f"embedded tiny Qwen2 f32, BFCL compact dialogs, {args.rows} x {args.length}, "
               f"{len(cpus)} threads each, median of {args.rounds} alternating rounds, "
               f"load {load():.1f}")
    row = [datetime.date.today().isoformat(), cpu_machine(), setting,
           str(rates["packed"]), str(rates["padded"]), "-", "-",
           f"{fill['packed']:.0%} / {fill['padded']:.0%}", "-"]
    ratio = "-"
    if "pytorch" in rate:
        ratio = f"{rate['packed'] / rate['pytorch']:.2f}x"
        row[5:7] = [str(rates["pytorch"]), ratio]
        row[8] = f"{difference:.1e}"
        print(f"seetjax packed / pytorch = {rate['packed'] / rate['pytorch']:.2f}x; first-update "
              f"loss difference {difference:.1e}")
    if jax.devices()[0].platform != "cpu":
        row[1] = jax.devices()[0].device_kind
    record("SFT (dialog tokens)", setting, rates, ratio)
    if not args.no_record:
        add_row(TITLE, COLUMNS, row)


if __name__ == "__main__":
    main()
