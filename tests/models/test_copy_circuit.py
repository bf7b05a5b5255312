"""The written copy circuit: a fresh embedded-size model continues sequences it has seen."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seetjax.defaults.embedded import EmbeddedSpec
from seetjax.learner.optimizer import param_path
from seetjax.models.copy_circuit import (
    CopyCircuit,
    copy_batch_rows,
    held_columns,
    install_copy_circuit,
    repeated_tokens,
)
from seetjax.models.transformer import Transformer

CFG = EmbeddedSpec().model_config(bos=None, eos=1, pad=0)


def _next_token_stats(model: Transformer) -> tuple[float, float]:
    """(argmax accuracy, mean NLL) where the next token repeats an earlier one."""
    rng = np.random.default_rng(0)
    tokens, mask = map(np.stack, zip(*(repeated_tokens(rng, 192, CFG.vocab_size)
                                       for _ in range(4))))
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    logits, _ = model(jnp.asarray(tokens), positions, jnp.ones(tokens.shape, jnp.int32))
    logp = np.asarray(jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32)))
    target = tokens[:, 1:]
    nll = -np.take_along_axis(logp, target[..., None], -1)[..., 0]
    return float((logp.argmax(-1) == target)[mask].mean()), float(nll[mask].mean())


@pytest.fixture(scope="module")
def fresh_and_wired():
    fresh = Transformer(CFG, rngs=nnx.Rngs(0))
    wired = Transformer(CFG, rngs=nnx.Rngs(0))
    install_copy_circuit(wired)
    return fresh, wired


def test_a_random_model_does_not_copy(fresh_and_wired):
    accuracy, _ = _next_token_stats(fresh_and_wired[0])
    assert accuracy < 0.05


def test_the_wired_model_continues_what_it_has_seen_with_confidence(fresh_and_wired):
    accuracy, nll = _next_token_stats(fresh_and_wired[1])
    assert accuracy > 0.95
    assert nll < 0.5  # not only the argmax: most of the probability on the copied token


def test_only_the_two_heads_residual_outputs_and_final_norm_change(fresh_and_wired):
    fresh, wired = fresh_and_wired
    same = lambda a, b: np.array_equal(np.asarray(a[...]), np.asarray(b[...]))  # noqa: E731
    assert same(fresh.embed_tokens.embedding, wired.embed_tokens.embedding)
    for i in (2, 3):  # layers without a written head: only their residual outputs scaled
        for name in ("q_proj", "k_proj", "v_proj"):
            assert same(getattr(fresh.layers[i].self_attn, name).kernel,
                        getattr(wired.layers[i].self_attn, name).kernel)
        np.testing.assert_allclose(np.asarray(wired.layers[i].mlp.down_proj.kernel[...]),
                                   0.1 * np.asarray(fresh.layers[i].mlp.down_proj.kernel[...]),
                                   rtol=1e-6)
    d = CFG.head_dim  # layer 1's second KV group and query heads 1-3 keep their init
    assert same(fresh.layers[1].self_attn.k_proj.kernel[:, d:],
                wired.layers[1].self_attn.k_proj.kernel[:, d:])
    assert same(fresh.layers[1].self_attn.q_proj.kernel[:, d:],
                wired.layers[1].self_attn.q_proj.kernel[:, d:])


@pytest.mark.parametrize("field, value, match", [
    ("induction_layer", 0, "prev_layer"),
    ("induction_layer", 4, "num_layers"),
    ("content_from", 3, "position_pairs"),
    ("content_from", 0, "position_pairs"),
])
def test_a_circuit_the_model_cannot_hold_names_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(CopyCircuit(), **{field: value}).check(CFG)


def test_held_columns_name_the_circuit_heads_query_and_key_parameters(fresh_and_wired):
    _, wired = fresh_and_wired
    shapes = {}
    jax.tree_util.tree_map_with_path(lambda path, x: shapes.setdefault(param_path(path), x.shape),
                                     nnx.state(wired, nnx.Param))
    held = held_columns(CFG)
    assert {p for p, _ in held} == {f"layers.{i}.self_attn.{proj}.{part}" for i in (0, 1)
                                    for proj in ("q_proj", "k_proj") for part in ("kernel", "bias")}
    assert all(p in shapes and n == CFG.head_dim <= shapes[p][-1] for p, n in held)


def test_copy_rows_train_only_the_repeats():
    rows = copy_batch_rows(np.random.default_rng(0), 2, 64, CFG.vocab_size, periods=(5, 6))
    assert rows["tokens"].shape == rows["loss_mask"].shape == (2, 64)
    np.testing.assert_array_equal(rows["tokens"][:, 5:], rows["tokens"][:, :-5])  # period 5
    np.testing.assert_array_equal(rows["loss_mask"][0], np.r_[np.zeros(6), np.ones(58)])
    np.testing.assert_array_equal(rows["positions"][1], np.arange(64))
    assert (rows["segment_ids"] == 1).all()
