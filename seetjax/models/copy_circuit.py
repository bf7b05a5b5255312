"""A copying (induction) circuit written into a randomly initialised decoder.

A tiny model trained from scratch for minutes never learns to copy a value from the user's
request into a call: induction heads (Olsson et al. 2022, "In-context Learning and Induction
Heads"; Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits") form only after
far more tokens than a CPU budget allows. `install_copy_circuit` writes the two-head circuit those
papers describe into the weights instead, so training starts from a model that already continues
any sequence it has seen before:

- a previous-token head (layer `prev_layer`, query head 0): zero query/key kernels and biases
  whose RoPE scores peak at offset 1 (the `position_pairs` highest frequencies, all in phase
  there); its value reads a code of the token (subspace A of an orthonormal basis) and its output
  writes it into subspace B, so position n carries a code of token n-1;
- an induction head (layer `induction_layer`, query head 0): query = the current token's A code,
  key = the B code (the previous token's), both on the lowest RoPE frequencies (rotation nearly
  constant over a dialog), so position m attends to every n whose previous token equals m's;
  its value reads the attended token's code in subspace C and its output writes it back, raising
  that token's logit through the tied embeddings.

Both heads use KV group 0, so the other query head of that group sees these keys and values too.
The other residual branches are scaled down (`residual_scale`) so the circuit is not drowned at
initialisation, and the final norm's scale raises the logit range that 0.02-scale tied embeddings
would otherwise cap at a few nats.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from seetjax.errors import invalid
from seetjax.models.config import ModelConfig
from seetjax.models.transformer import Transformer, rope_inv_freq


@dataclasses.dataclass(frozen=True)
class CopyCircuit:
    """Where the circuit goes and how strong it is (see the module docstring).

    position_pairs / position_scale: RoPE pairs and amplitude of the previous-token head's biases;
    content_from: first RoPE pair the induction head matches on (the pairs above are the lowest
    frequencies); write_scale: the previous-token code's size in the residual; match_scale: the
    induction head's query/key gain; copy_scale: its output gain.
    """

    seed: int = 0
    prev_layer: int = 0
    induction_layer: int = 1
    position_pairs: int = 6
    position_scale: float = 8.0
    content_from: int = 16
    write_scale: float = 0.2
    match_scale: float = 6.0
    copy_scale: float = 10.0
    residual_scale: float = 0.1
    final_norm_scale: float = 6.0

    def check(self, cfg: ModelConfig) -> None:
        """Raises ValueError naming the field the model cannot hold."""
        half = cfg.head_dim // 2
        if not 0 <= self.prev_layer < self.induction_layer < cfg.num_layers:
            raise invalid(
                self, "prev_layer", self.prev_layer, "need 0 <= prev_layer < induction_layer "
                f"({self.induction_layer}) < num_layers ({cfg.num_layers})")
        if not 0 < self.position_pairs <= self.content_from < half:
            raise invalid(
                self, "position_pairs", self.position_pairs, "need 0 < position_pairs <= "
                f"content_from ({self.content_from}) < head_dim / 2 ({half})")
        if 4 * (half - self.content_from) + cfg.head_dim > cfg.hidden_size:
            raise invalid(
                self, "content_from", self.content_from, "subspaces A, B, C need "
                f"{4 * (half - self.content_from) + cfg.head_dim} dims, hidden_size is "
                f"{cfg.hidden_size}")


def repeated_tokens(rng: np.random.Generator, length: int, vocab_size: int,
                    periods: tuple[int, int] = (5, 40), lowest_id: int = 300
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A random token string repeated with a random period in [periods): (tokens [length],
    mask [length - 1]: True where the next token repeats an earlier one, i.e. copying predicts
    it). Ids below `lowest_id` (bytes, special and frequent tokens) are left out."""
    period = int(rng.integers(*periods))
    tokens = np.resize(rng.integers(lowest_id, vocab_size, period), length).astype(np.int32)
    mask = np.zeros(length - 1, bool)
    mask[period:] = True
    return tokens, mask


def copy_batch_rows(rng: np.random.Generator, rows: int, seq_len: int, vocab_size: int,
                    periods: tuple[int, int] = (3, 64)) -> dict[str, np.ndarray]:
    """`rows` rows of repeated random tokens in a packed batch's layout (tokens, positions,
    segment_ids, loss_mask [rows, seq_len]): the loss falls on the repeats only. Mixed into
    training batches they keep a written circuit copying (the README's copy-circuit probes)."""
    out = {"tokens": [], "loss_mask": []}
    for _ in range(rows):
        tokens, mask = repeated_tokens(rng, seq_len, vocab_size, periods)
        out["tokens"].append(tokens)
        out["loss_mask"].append(np.r_[0.0, mask].astype(np.float32))
    return {"tokens": np.stack(out["tokens"]), "loss_mask": np.stack(out["loss_mask"]),
            "positions": np.tile(np.arange(seq_len, dtype=np.int32), (rows, 1)),
            "segment_ids": np.ones((rows, seq_len), np.int32)}


def held_columns(cfg: ModelConfig, circuit: CopyCircuit = CopyCircuit()
                 ) -> tuple[tuple[str, int], ...]:
    """The circuit heads' query and key projections (kernel columns and bias entries of query
    head 0 and KV head 0 in both layers): `OptimizerConfig.held`, so training keeps which
    positions the heads match while their values and outputs still learn."""
    return tuple((f"layers.{layer}.self_attn.{proj}.{part}", cfg.head_dim)
                 for layer in (circuit.prev_layer, circuit.induction_layer)
                 for proj in ("q_proj", "k_proj") for part in ("kernel", "bias"))


def _write(param, index, block) -> None:
    """param[index] = block, in the parameter's dtype."""
    value = np.array(param[...], np.float32)
    value[index] = block
    param[...] = jnp.asarray(value, param[...].dtype)


def install_copy_circuit(model: Transformer, circuit: CopyCircuit = CopyCircuit()) -> None:
    """Writes `circuit` into `model`'s weights in place (a freshly initialised Qwen2-layout model
    with q/k/v biases and tied embeddings)."""
    cfg = model.config
    circuit.check(cfg)
    if not (cfg.qkv_bias and cfg.tie_word_embeddings):
        raise ValueError("install_copy_circuit needs qkv_bias=True and tie_word_embeddings=True")
    d, half = cfg.head_dim, cfg.head_dim // 2
    inv_freq = rope_inv_freq(cfg)
    basis, _ = np.linalg.qr(np.random.default_rng(circuit.seed).normal(
        size=(cfg.hidden_size, cfg.hidden_size)))
    n = 2 * (half - circuit.content_from)
    code_a, code_b, code_c = basis[:, :n], basis[:, n:2 * n], basis[:, 2 * n:2 * n + d]

    for layer in model.layers:
        for out in (layer.self_attn.o_proj.kernel, layer.mlp.down_proj.kernel):
            out[...] = out[...] * circuit.residual_scale
    model.norm.scale[...] = model.norm.scale[...] * circuit.final_norm_scale

    # Previous-token head: q = b_q, k = b_k; per pair j, q.k after RoPE is
    # a^2 cos((m - n - 1) f_j), largest at n = m - 1 for every j at once.
    q_bias, k_bias = np.zeros(d), np.zeros(d)
    pairs = np.arange(circuit.position_pairs)
    q_bias[pairs] = circuit.position_scale
    k_bias[pairs] = circuit.position_scale * np.cos(inv_freq[pairs])
    k_bias[pairs + half] = circuit.position_scale * np.sin(inv_freq[pairs])
    prev = model.layers[circuit.prev_layer].self_attn
    _write_head(prev, q_kernel=None, q_bias=q_bias, k_kernel=None, k_bias=k_bias,
                v_kernel=code_a, o_kernel=circuit.write_scale * code_b.T)

    # Induction head: content on the lowest frequencies, dims [content_from, half) of each half.
    content = np.r_[circuit.content_from:half, half + circuit.content_from:d]
    q_kernel, k_kernel = np.zeros((cfg.hidden_size, d)), np.zeros((cfg.hidden_size, d))
    q_kernel[:, content] = circuit.match_scale * code_a
    k_kernel[:, content] = circuit.match_scale * code_b
    induction = model.layers[circuit.induction_layer].self_attn
    _write_head(induction, q_kernel=q_kernel, q_bias=np.zeros(d), k_kernel=k_kernel,
                k_bias=np.zeros(d), v_kernel=code_c, o_kernel=circuit.copy_scale * code_c.T)


def _write_head(attn, *, q_kernel, q_bias, k_kernel, k_bias, v_kernel, o_kernel) -> None:
    """Sets query head 0 and KV head 0 of `attn`: kernels None mean zero; v_kernel [H, <= D]
    fills the value's first columns (the rest zero); o_kernel [<= D, H] the output's first rows."""
    d = attn.config.head_dim
    for proj, kernel, bias in ((attn.q_proj, q_kernel, q_bias), (attn.k_proj, k_kernel, k_bias)):
        _write(proj.kernel, np.s_[:, :d], 0 if kernel is None else kernel)
        _write(proj.bias, np.s_[:d], bias)
    value = np.zeros((v_kernel.shape[0], d))
    value[:, :v_kernel.shape[1]] = v_kernel
    _write(attn.v_proj.kernel, np.s_[:, :d], value)
    _write(attn.v_proj.bias, np.s_[:d], 0)
    output = np.zeros((d, o_kernel.shape[1]))
    output[:o_kernel.shape[0]] = o_kernel
    _write(attn.o_proj.kernel, np.s_[:d, :], output)
