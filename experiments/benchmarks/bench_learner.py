"""Learner throughput: seetjax's jitted GRPO update vs the same update in PyTorch, side by side.

Same random tiny Qwen2 weights (PRESETS['tiny-qwen2']), same batch (8 x 512: a 256-token prompt
and a 256-token completion per row, groups of 4), same objective (token log-probs, GRPO group
advantages, clipped-ratio loss with token-mean, global-norm clipping, AdamW), in one process;
rounds alternate between the two so machine load hits both alike. The first update's loss is
compared as a check that both compute the same thing. Prints tokens/s of each, their ratio and
seetjax's MFU against a measured fp32 matmul peak, and appends a row to BENCHMARKS.md.

    python experiments/benchmarks/bench_learner.py [--rows 8 --length 512 --rounds 5]

Both sides run pinned to the same `--threads` CPUs (0: all), warmed up, in alternating rounds;
rates are medians with their spread, and the load average is recorded with them.

On a GPU: `--preset qwen2.5-1.5b --dtype bfloat16 --no-torch` reports the MFU of a bf16 update
against the device's peak.
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
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.learner import create_learner, learner_config
from seetjax.models import PRESETS, Transformer
from seetjax.models.hf import save_hf_checkpoint

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402
from torch_peer import optimizer_step, torch_model_and_optimizer  # noqa: E402

TITLE = "Learner: GRPO update, seetjax vs PyTorch (bench_learner.py)"
COLUMNS = ["date", "machine", "setting", "seetjax tok/s", "pytorch tok/s", "speed-up",
           "seetjax MFU", "first-update loss difference"]
CLIP, LR, MAX_NORM, EPS = 0.2, 1e-5, 1.0, 1e-6


def make_batch(rows: int, length: int, vocab: int, group: int = 4, seed: int = 0,
               shared_prompts: bool = False) -> dict:
    """Rows of a length // 2 prompt and a completion filling the row; with `shared_prompts` a
    group's rows share their prompt (as GRPO samples them) and each completion is length / (2 x
    group) tokens, the rest padding, so a group's prompt and completions fill one row's width."""
    rng = np.random.RandomState(seed)
    prompt = length // 2
    tokens = rng.randint(0, vocab, (rows, length)).astype(np.int32)
    segments = np.ones((rows, length), np.int32)
    if shared_prompts:
        tokens[:, :prompt] = tokens[::group, :prompt].repeat(group, axis=0)[:rows]
        segments[:, prompt + prompt // group:] = 0
    mask = np.zeros((rows, length), np.float32)
    mask[:, prompt:] = 1.0
    mask *= segments
    return dict(tokens=tokens, mask=mask, segments=segments,
                old=np.where(mask > 0, -rng.rand(rows, length) * 0.1 - 8.9, 0).astype(np.float32),
                rewards=rng.randint(0, 2, rows).astype(np.float32),
                groups=(np.arange(rows) // group).astype(np.int32))


def seetjax_update(model: Transformer, data: dict, share_prefixes: bool = True):
    config = learner_config({"algorithm": "grpo", "loss": {"kl_coef": 0.0,
                                                           "aggregation": "token-mean"},
                             "advantage": {"eps": EPS},
                             "optimizer": {"learning_rate": LR, "max_grad_norm": MAX_NORM},
                             "share_prefixes": share_prefixes})
    learner, state = create_learner(model, config, mesh=None)
    rows, length = data["tokens"].shape
    positions = np.tile(np.arange(length), (rows, 1)) * data["segments"]
    seqs = TokenSequences(tokens=data["tokens"], positions=positions,
                          segment_ids=data["segments"], loss_mask=data["mask"])
    batch = TrajectoryBatch(sequences=seqs, old_logprobs=data["old"], rewards=data["rewards"],
                            group_ids=data["groups"])
    box = {"state": state}

    def run() -> dict:
        box["state"], metrics = learner.update(box["state"], batch)
        return metrics

    return run


def torch_update(hf_dir: str, data: dict):
    import torch

    model, optimizer = torch_model_and_optimizer(hf_dir, LR)
    tokens = torch.from_numpy(data["tokens"]).long()
    # As TRL's GRPO trainer: logits only for the completion (`logits_to_keep`), whose tokens are
    # the row's last `keep` (seetjax's learner likewise runs its LM head at target tokens only).
    keep = tokens.shape[1] - int(np.argmax(data["mask"].any(0)))
    mask = torch.from_numpy(data["mask"])[:, -keep:]
    old = torch.from_numpy(data["old"])[:, -keep:]
    rewards, groups = torch.from_numpy(data["rewards"]), torch.from_numpy(data["groups"]).long()
    same = (groups[:, None] == groups[None, :]).float()
    count = same.sum(1)
    mean = same @ rewards / count
    std = torch.sqrt((same * (rewards[None, :] - mean[:, None]) ** 2).sum(1) / (count - 1))
    advantages = ((rewards - mean) / (std + EPS))[:, None]

    def run() -> dict:
        logits = model(input_ids=tokens, logits_to_keep=keep + 1).logits[:, :-1].float()
        picked = logits.gather(-1, tokens[:, -keep:, None])[..., 0]
        logprobs = picked - torch.logsumexp(logits, dim=-1)
        ratio = torch.exp(logprobs - old)
        per_token = torch.maximum(-advantages * ratio,
                                  -advantages * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
        loss = (per_token * mask).sum() / mask.sum()
        return optimizer_step(model, optimizer, loss, MAX_NORM)

    return run


def timed(run) -> tuple[float, dict]:
    start = time.perf_counter()
    metrics = run()
    return time.perf_counter() - start, metrics


def matmul_peak(n: int = 2048, dtype=jnp.float32) -> float:
    """Measured FLOP/s of a jitted n^3 matmul on the default device (the CPU 'peak' for MFU)."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(timed(lambda: f(a).block_until_ready())[0] for _ in range(5))
    return 2 * n ** 3 / best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="tiny-qwen2")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="CPUs for both sides (0: all)")
    parser.add_argument("--dtype", default="float32", help="compute dtype of the seetjax model")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-record", action="store_true", help="print only")
    parser.add_argument("--json", help="also write seetjax's figures to this file")
    parser.add_argument("--shared-prompts", action="store_true",
                        help="a group's rows share their prompt: seetjax with shared prefixes "
                             "against seetjax computing every row (no torch)")
    args = parser.parse_args()
    if args.shared_prompts:
        shared_prompts(args)
        return

    cpus = pin_threads(args.threads)
    cfg = PRESETS[args.preset].replace(dtype=args.dtype)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    data = make_batch(args.rows, args.length, cfg.vocab_size)
    tokens = args.rows * args.length
    runs = {"seetjax": seetjax_update(model, data)}
    if not args.no_torch:
        with tempfile.TemporaryDirectory() as hf_dir:
            save_hf_checkpoint(model, hf_dir)
            runs["pytorch"] = torch_update(hf_dir, data)
    # First updates: compile / warm up, and check both compute the same loss on the same weights.
    first = runs["seetjax"]()
    line = f"first update: seetjax loss {first['loss']:.6f} (incl. compile {first['step_seconds']:.1f}s)"
    torch_first = None
    if "pytorch" in runs:
        torch_first = runs["pytorch"]()["loss"]
        line += f", torch loss {torch_first:.6f}, |diff| {abs(first['loss'] - torch_first):.2e}"
    print(line)
    times = alternate(runs, args.rounds, warmup=0)
    rates = {name: summary(t, tokens) for name, t in times.items()}
    ours_s = times["seetjax"]
    jax_tps = rates["seetjax"].rate
    print(f"seetjax: {rates['seetjax']} tokens/s (median of {args.rounds}, {len(cpus)} CPUs)")
    device = jax.devices()[0]
    if device.platform == "cpu":
        peak = matmul_peak()
        model_flops = 3 * cfg.flops_per_token(args.length) * tokens
        mfu = model_flops / statistics.median(ours_s) / peak
        mfu_text = f"{mfu:.0%} of {peak / 1e9:.0f} GFLOP/s measured fp32 matmul"
    else:
        mfu = statistics.median(runs["seetjax"]()["mfu"] for _ in range(3))  # the learner's own
        mfu_text = f"{mfu:.1%} of {device.device_kind} bf16 peak"
    print(f"seetjax MFU: {mfu_text}")
    setting = (f"{args.preset} {cfg.dtype}, batch {args.rows} x {args.length}, {len(cpus)} "
               f"threads each, median of {args.rounds} alternating rounds, load {load():.1f}")
    row = [datetime.date.today().isoformat(),
           cpu_machine() if device.platform == "cpu" else device.device_kind, setting,
           str(rates["seetjax"]), "-", "-", mfu_text, "-"]
    ratio = "-"
    if "pytorch" in rates:
        torch_tps = rates["pytorch"].rate
        ratio = f"{jax_tps / torch_tps:.2f}x"
        print(f"pytorch: {rates['pytorch']} tokens/s; seetjax / pytorch = {ratio}")
        row[4:6] = [str(rates["pytorch"]), ratio]
        row[7] = f"{abs(first['loss'] - torch_first):.1e}"
    record("learner (GRPO update)", setting, rates, ratio)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.device_kind, "setting": setting, "mfu": mfu,
                       "mfu_text": mfu_text, "tokens_per_s": jax_tps,
                       "first_update_s": first["step_seconds"]}, f, indent=1)
    if not args.no_record:
        add_row(TITLE, COLUMNS, row)


def shared_prompts(args) -> None:
    """GRPO groups sharing their prompt (`make_batch(shared_prompts=True)`): the update with
    `learner.share_prefixes` against the same update computing every row, alternating."""
    pin_threads(args.threads)
    cfg = PRESETS[args.preset].replace(dtype=args.dtype)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    data = make_batch(args.rows, args.length, cfg.vocab_size, shared_prompts=True)
    runs = {"shared": seetjax_update(model, data), "unshared": seetjax_update(model, data, False)}
    firsts = {name: run() for name, run in runs.items()}  # compiles
    tokens = float(data["segments"].sum())
    rates = {name: summary(t, tokens) for name, t in alternate(runs, args.rounds, 0).items()}
    saved = firsts["shared"]["shared_prefix_share"]
    ratio = f"{rates['shared'].rate / rates['unshared'].rate:.2f}x"
    device = jax.devices()[0]
    setting = (f"{args.preset} {cfg.dtype}, batch {args.rows} x {args.length}, groups of 4 "
               f"sharing a {args.length // 2}-token prompt, {args.length // 8}-token completions, "
               f"median of {args.rounds} alternating rounds, load {load():.1f}")
    print(f"shared prefixes {rates['shared']} tok/s, every row computed {rates['unshared']} "
          f"tok/s ({ratio}); tokens not computed {saved:.0%}; first-update loss difference "
          f"{abs(firsts['shared']['loss'] - firsts['unshared']['loss']):.1e}")
    record("learner, shared prompts", setting, rates, ratio)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.device_kind, "setting": setting, "ratio": ratio,
                       "tokens_per_s": rates["shared"].rate,
                       "unshared_tokens_per_s": rates["unshared"].rate, "saved": saved,
                       "mfu": firsts["shared"].get("mfu")}, f, indent=1)


if __name__ == "__main__":
    main()
