"""Contrastive training on a tiny random encoder: batches, frozen parts, exact resume."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from seetjax.learner.state import new_train_state
from seetjax.retrieval.corpus import tool_doc
from seetjax.retrieval.train import (
    TrainConfig,
    batch_at,
    make_train_step,
    optimizer_for,
    split_encoder,
    train,
    training_pairs,
)

TOOLS = ["weather", "email", "triangle", "flight", "currency", "music", "stocks", "recipe",
         "translate", "calendar", "taxi", "news"]
DOCS = [tool_doc({"name": f"{t}_tool", "description": f"Does {t} things."}) for t in TOOLS]
# Eight queries; two share the weather tool, one needs two tools.
QUERIES = [(f"please help with {t}", {DOCS[i].id}) for i, t in enumerate(TOOLS[:6])]
QUERIES += [("weather again", {DOCS[0].id}), ("email and calendar", {DOCS[1].id, DOCS[9].id})]
CFG = TrainConfig(steps=4, batch_size=4, hard_negatives=1, mined=3, query_length=16,
                  doc_length=16, warmup_steps=1, learning_rate=1e-3, checkpoint_every=2)


@pytest.fixture(scope="module")
def pairs(tiny):
    return training_pairs(tiny, DOCS, QUERIES, CFG, excluded={DOCS[11].id})


def test_pairs_and_batches(pairs):
    assert len(pairs.positive) == 9  # one pair per gold doc
    assert 11 not in pairs.candidates  # the excluded doc is never a negative
    for p, candidates in enumerate(pairs.candidates):
        assert not set(candidates) & pairs.relevant[p]
    batch = batch_at(pairs, CFG, 3)
    assert batch["query_ids"].shape == (4, 16) and batch["doc_ids"].shape == (8, 16)
    assert not batch["false_negatives"].diagonal().any()
    for name, value in batch_at(pairs, CFG, 3).items():  # a pure function of the step
        np.testing.assert_array_equal(value, batch[name])


def test_shared_gold_is_a_false_negative_not_a_negative(pairs):
    """All nine pairs in one batch: the two weather queries share doc 0; "email and calendar"
    has two pairs (docs 1 and 9) and doc 1 is also "please help with email"'s positive."""
    batch = batch_at(pairs, TrainConfig(batch_size=9, mined=3, hard_negatives=0), 0)
    docs = [tuple(row) for row in batch["doc_ids"]]
    masked = batch["false_negatives"]
    for i in range(9):
        for j in range(9):
            if i != j and docs[i] == docs[j]:
                assert masked[i, j]
    # weather: 2 (each other's column); email: 1 + 2 (the email and calendar rows) + 2.
    assert masked.sum() == 7


def flat_params(model):
    return {k: np.asarray(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(model))}


# (config change, is a parameter path trained under it)
PARTIAL = {"top_layer": ({"trainable_layers": 1}, lambda key: key[:3] == ("encoder", "layer", 1)),
           "frozen_embeddings": ({"freeze_embeddings": True}, lambda key: key[0] != "embeddings")}


@pytest.mark.parametrize("name", PARTIAL)
def test_partial_training_resumes_exactly_and_frozen_parts_stay(tiny, pairs, tmp_path, name):
    change, is_trained = PARTIAL[name]
    cfg = dataclasses.replace(CFG, **change)
    losses = {}
    full = train(tiny, pairs, CFG, tmp_path / "full",
                 on_step=lambda step, m: losses.setdefault(("full", step), m["loss"]))
    straight = train(tiny, pairs, cfg, tmp_path / "straight",
                     on_step=lambda step, m: losses.setdefault(("partial", step), m["loss"]))
    # Step 1's loss is that of the untouched encoder, whatever is frozen.
    np.testing.assert_allclose(losses["partial", 1], losses["full", 1], rtol=1e-6)

    class Crash(Exception):
        pass

    def crash_at_2(step, metrics):
        if step == 2:
            raise Crash
    with pytest.raises(Crash):
        train(tiny, pairs, cfg, tmp_path / "resumed", on_step=crash_at_2)
    resumed = train(tiny, pairs, cfg, tmp_path / "resumed")
    assert full.steps == straight.steps == resumed.steps == 4
    before, after, again = (flat_params(m) for m in (tiny.model, straight.model, resumed.model))
    for key in before:
        np.testing.assert_array_equal(after[key], again[key], err_msg=str(key))
        assert np.array_equal(before[key], after[key]) != is_trained(key), key


@pytest.mark.parametrize("change,scatters", [({}, True), ({"freeze_embeddings": True}, False),
                                             ({"trainable_layers": 1}, False)])
def test_frozen_embeddings_get_no_gradient(tiny, pairs, change, scatters):
    """The word-embedding lookup's gradient is a scatter-add into the [vocab, hidden] table: only
    a step that trains the embeddings has one, and the optimizer state covers only the trained
    parameters."""
    cfg = dataclasses.replace(CFG, **change)
    table = f"f32[{tiny.model.config.vocab_size},{tiny.model.config.hidden_size}] = scatter-add"
    graphdef, params, frozen = split_encoder(tiny.model, cfg)
    state = new_train_state(params, frozen, optimizer_for(cfg), keep_reference=False, seed=0)
    step = make_train_step(graphdef, optimizer_for(cfg), cfg)
    assert (table in str(jax.make_jaxpr(step)(state, batch_at(pairs, cfg, 0)))) == scatters
    trained = sum(x.size for x in jax.tree.leaves(params))
    moments = sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim)  # less the counts
    assert moments == 2 * trained
    with pytest.raises(ValueError, match="trainable_layers=9"):
        split_encoder(tiny.model, TrainConfig(trainable_layers=9))


def test_bad_configs_are_named():
    with pytest.raises(ValueError, match="batch_size=1"):
        TrainConfig(batch_size=1)
    with pytest.raises(ValueError, match="hard_negatives=5"):
        TrainConfig(hard_negatives=5, mined=2)
    with pytest.raises(ValueError, match="temperature=0"):
        TrainConfig(temperature=0)
    with pytest.raises(ValueError, match="trainable_layers=-1"):
        TrainConfig(trainable_layers=-1)
    with pytest.raises(ValueError, match="freeze_embeddings=1"):
        TrainConfig(freeze_embeddings=1)
