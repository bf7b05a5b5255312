"""Does a written copy circuit (seetjax.models.copy_circuit) make SFT read arguments?

Trains the embedded default from its random init on single-request generated dialogs (1 turn,
1 call, 1 class, the 4 categories), with or without the circuit, then scores held-out tasks under
teacher forcing (greedy decoding reproduces a token iff it is the argmax), per token kind of the
call: the function name's first / later tokens, an argument value's first / later tokens (the
later ones are what copying predicts), the rest; plus whole-call exact match. Options keep the
circuit through training: `--freeze` holds its two heads' query/key columns, `--copy_rows` mixes
repeated random-token rows into the batches. One setting per process; results as JSON.

    python experiments/copy_circuit/copy_circuit.py --out=experiments/copy_circuit/results/baseline.json \
        --circuit=False --learning_rate=1e-3
    python experiments/copy_circuit/copy_circuit.py --out=experiments/copy_circuit/results/circuit.json
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from flax import nnx

from seetjax.data.bfcl_dialogs import task_dialog
from seetjax.defaults.embedded import embedded_model_dir
from seetjax.envs.bfcl import data as bfcl_data
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.generated import Difficulty, generate_tasks
from seetjax.learner.optimizer import hold_slices
from seetjax.models.copy_circuit import (
    copy_batch_rows,
    held_columns,
    install_copy_circuit,
    repeated_tokens,
)
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer

flags.DEFINE_string("out", None, "JSON result path.", required=True)
flags.DEFINE_bool("circuit", True, "Write the copy circuit into the random init.")
flags.DEFINE_bool("freeze", True, "Hold the circuit heads' query/key columns (with --circuit).")
flags.DEFINE_float("copy_rows", 0.25, "Share of rows that are repeated random tokens.")
flags.DEFINE_integer("steps", 150, "Training steps.")
flags.DEFINE_integer("tasks_per_category", 256, "Training dialogs per category.")
flags.DEFINE_integer("batch_size", 4, "Rows per step.")
flags.DEFINE_integer("seq_len", 1024, "Tokens per row (dialogs packed).")
flags.DEFINE_float("learning_rate", 3e-4, "AdamW peak (warmup 10 steps, cosine to 10%).")
flags.DEFINE_integer("eval_tasks", 48, "Held-out tasks per split.")
F = flags.FLAGS

SINGLE = Difficulty(turns=(1, 1), actions_per_turn=1, calls_per_turn=1, classes=1)
PROMPTS = BfclEnvConfig(prompt_style="compact", compact_description_chars=0)
KINDS = ("name_first", "name_rest", "value_first", "value_rest", "other")


def encode(tok: Tokenizer, task) -> tuple[np.ndarray, np.ndarray]:
    dialog = task_dialog(task, PROMPTS)
    chat = tok.encode_messages(dialog.messages, dialog.tools)
    return np.asarray(chat.ids, np.int32), np.asarray(chat.loss_mask, np.float32)


def packed_row(rng, dialogs, seq_len):
    """Whole dialogs drawn at random until the next would not fit: tokens, positions, segment
    ids (0 = padding), loss mask."""
    row = [np.zeros(seq_len, np.int32) for _ in range(3)] + [np.zeros(seq_len, np.float32)]
    start, segment = 0, 1
    while True:
        ids, mask = dialogs[rng.integers(len(dialogs))]
        if start + len(ids) > seq_len:
            return row
        end = start + len(ids)
        row[0][start:end], row[1][start:end], row[2][start:end] = ids, np.arange(len(ids)), segment
        row[3][start:end] = mask
        start, segment = end, segment + 1


def copy_row(rng, seq_len, vocab_size):
    row = copy_batch_rows(rng, 1, seq_len, vocab_size)
    return tuple(row[k][0] for k in ("tokens", "positions", "segment_ids", "loss_mask"))


def train(model, tok, rng):
    dialogs = [encode(tok, t) for c in bfcl_data.CATEGORIES for t in generate_tasks(
        F.tasks_per_category, seed=1000, split="train", category=c, difficulty=SINGLE)]
    dialogs = [(ids[:F.seq_len], m[:F.seq_len]) for ids, m in dialogs]
    graph, params = nnx.split(model, nnx.Param)
    schedule = optax.warmup_cosine_decay_schedule(0, F.learning_rate, min(10, F.steps - 1), F.steps,
                                                  F.learning_rate * 0.1)
    held = held_columns(model.config) if F.circuit and F.freeze else ()
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01),
                      hold_slices(held))
    opt_state = opt.init(params)

    def loss_fn(params, tokens, positions, segments, mask):
        m = nnx.merge(graph, params)
        hidden, _ = m.hidden_states(tokens, positions, segments)
        logp = jax.nn.log_softmax(m.logits(hidden)[:, :-1])
        nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
        weight = mask[:, 1:] * (segments[:, 1:] == segments[:, :-1])
        return (nll * weight).sum() / jnp.maximum(weight.sum(), 1.0)

    @jax.jit
    def step(params, opt_state, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(F.steps):
        rows = [copy_row(rng, F.seq_len, model.config.vocab_size)
                if rng.random() < F.copy_rows else packed_row(rng, dialogs, F.seq_len)
                for _ in range(F.batch_size)]
        params, opt_state, loss = step(params, opt_state,
                                       *(jnp.asarray(np.stack(x)) for x in zip(*rows)))
        losses.append(float(loss))
    nnx.update(model, params)
    return losses


def call_token_kinds(pieces: list[str]) -> list[str]:
    """Each token of a call reply `[f(a=1, b='x')]`: which part of the call it falls in."""
    text = "".join(pieces)
    spans = [("value", m.start(1), m.end(1))
             for m in re.finditer(r"=\s*'?([^',)\]]+)", text)]
    name = re.match(r"\s*\[([\w.]+)\(", text)
    if name:
        spans.append(("name", name.start(1), name.end(1)))
    kinds, seen, offset = [], set(), 0
    for piece in pieces:
        start, offset = offset, offset + len(piece)
        kind = "other"
        for part, a, b in spans:
            if start < b and offset > a:
                kind = f"{part}_{'rest' if (part, a) in seen else 'first'}"
                seen.add((part, a))
                break
        kinds.append(kind)
    return kinds


def padded(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row of `ids` padded to a power of two (few compiles): tokens, positions, segments."""
    width = 1 << max(7, int(np.ceil(np.log2(len(ids)))))
    rows = (ids, np.arange(len(ids), dtype=np.int32), np.ones(len(ids), np.int32))
    return tuple(np.pad(x, (0, width - len(ids)))[None] for x in rows)


def repeat_accuracy(model, rows: int = 8, length: int = 256) -> float:
    """Next-token accuracy where the token repeats an earlier one (repeated random strings):
    whether the model still copies."""
    rng = np.random.default_rng(1)
    tokens, mask = map(np.stack, zip(*(repeated_tokens(rng, length, model.config.vocab_size)
                                       for _ in range(rows))))
    positions = np.broadcast_to(np.arange(length, dtype=np.int32), tokens.shape)
    logits, _ = model(jnp.asarray(tokens), jnp.asarray(positions), jnp.ones_like(tokens))
    return float((np.asarray(logits[:, :-1]).argmax(-1) == tokens[:, 1:])[mask].mean())


def evaluate(model, tok) -> dict:
    graph, state = nnx.split(model)

    @jax.jit
    def argmax(state, tokens, positions, segments):
        hidden, _ = nnx.merge(graph, state).hidden_states(tokens, positions, segments)
        return jnp.argmax(nnx.merge(graph, state).logits(hidden), -1)

    result = {}
    for split, start in (("test", 0), ("validation", 10**9)):
        right = dict.fromkeys(KINDS, 0)
        total = dict.fromkeys(KINDS, 0)
        exact = calls = 0
        for task in generate_tasks(F.eval_tasks, seed=7, split="test" if split == "test"
                                   else "train", category="base", difficulty=SINGLE,
                                   start=start):
            ids, mask = encode(tok, task)
            pred = np.asarray(argmax(state, *padded(ids)))[0, :len(ids) - 1]
            target, scored = ids[1:], mask[1:] > 0
            i = 0
            while i < len(scored):  # each run of scored tokens is one reply
                if not scored[i]:
                    i += 1
                    continue
                j = i
                while j < len(scored) and scored[j]:
                    j += 1
                pieces = [tok.hf.decode([t]) for t in target[i:j]]
                if "".join(pieces).lstrip().startswith("["):
                    calls += 1
                    exact += bool((pred[i:j] == target[i:j]).all())
                    for k, kind in enumerate(call_token_kinds(pieces)):
                        right[kind] += int(pred[i + k] == target[i + k])
                        total[kind] += 1
                i = j
        result[split] = {"call_exact": exact / max(calls, 1), "calls": calls,
                         **{k: {"accuracy": right[k] / max(total[k], 1), "tokens": total[k]}
                            for k in KINDS}}
    return result


def main(_):
    model_dir = embedded_model_dir()
    tok, model = Tokenizer.from_pretrained(model_dir), load_hf_checkpoint(model_dir)
    if F.circuit:
        install_copy_circuit(model)
    copying_before = repeat_accuracy(model)
    t0 = time.time()
    losses = train(model, tok, np.random.default_rng(0))
    out = {"flags": {k: F[k].value for k in ("circuit", "freeze", "copy_rows", "steps",
                                             "tasks_per_category", "batch_size", "seq_len",
                                             "learning_rate")},
           "train_s": round(time.time() - t0, 1), "final_losses": losses[-10:],
           "repeat_accuracy": {"before": copying_before, "after": repeat_accuracy(model)},
           **evaluate(model, tok)}
    Path(F.out).parent.mkdir(parents=True, exist_ok=True)
    Path(F.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    app.run(main)
