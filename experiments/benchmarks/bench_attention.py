"""Training attention in causal query blocks vs one block (ModelConfig.attention_block).

The embedded model's forward and backward (a token-mean log-likelihood of random tokens) at a
given batch shape, once per block size, compiled once each; rounds alternate between the block
sizes so machine load hits all alike. Prints and records tokens/s of each, the speed-up of each
block size over one block, and the largest loss and gradient difference (the blocked result must
equal the unblocked one up to float rounding).

    python experiments/benchmarks/bench_attention.py [--rows 4 --length 2048 --blocks 0,512,256]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.defaults.embedded import embedded_model_dir
from seetjax.models import Transformer, positions_from_mask
from seetjax.models.hf import load_hf_checkpoint

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

TITLE = "Training attention: causal query blocks vs one block (bench_attention.py)"
COLUMNS = ["date", "machine", "setting", "tok/s by block size", "speed-up over one block",
           "max loss / grad difference"]


def step_fn(model: Transformer, tokens: jax.Array):
    """A jitted value-and-grad of the mean next-token log-likelihood of `tokens`."""
    graphdef, state = nnx.split(model)
    mask = np.ones(tokens.shape, np.int32)
    positions = positions_from_mask(mask)

    @jax.jit
    def step(state):
        def loss(state):
            logits, _ = nnx.merge(graphdef, state)(tokens, positions, mask)
            logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
            return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).mean()
        return jax.value_and_grad(loss)(state)

    return step, state


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--blocks", default="0,512,256")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="CPUs (0: all)")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    cpus = pin_threads(args.threads)
    blocks = [int(b) for b in args.blocks.split(",")]
    cfg = load_hf_checkpoint(embedded_model_dir()).config
    tokens = jax.random.randint(jax.random.key(0), (args.rows, args.length), 0, cfg.vocab_size)
    steps, results = {}, {}
    for block in blocks:
        step, state = step_fn(Transformer(cfg.replace(attention_block=block), rngs=nnx.Rngs(0)),
                              tokens)
        results[block] = jax.block_until_ready(step(state))  # compiles
        steps[block] = (step, state)
    times = alternate({b: lambda s=steps[b]: jax.block_until_ready(s[0](s[1])) for b in blocks},
                      args.rounds, warmup=0)
    rates = {b: summary(t, args.rows * args.length) for b, t in times.items()}
    rate = {b: r.rate for b, r in rates.items()}
    ref_loss, ref_grads = results[blocks[0]]
    diff = max(max(abs(float(loss - ref_loss)), max(float(abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(grads), jax.tree.leaves(ref_grads)))) for loss, grads in results.values())
    cells = [", ".join(f"{b}: {rates[b]}" for b in blocks),
             ", ".join(f"{b}: {rate[b] / rate[blocks[0]]:.2f}x" for b in blocks[1:]),
             f"{diff:.1e}"]
    print(dict(zip(COLUMNS[3:], cells)))
    setting = (f"embedded tiny Qwen2 f32, forward + backward, {args.rows} x {args.length}, "
               f"{len(cpus)} threads, median of {args.rounds} alternating rounds, "
               f"load {load():.1f}")
    record("training attention (block size)", setting, {f"block {b}": r for b, r in rates.items()},
           f"{rate[blocks[-1]] / rate[blocks[0]]:.2f}x ({blocks[-1]} over {blocks[0]})")
    if not args.no_record:
        add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(), setting] + cells)


if __name__ == "__main__":
    main()
