"""A tiny model and realistic random batches, shared by the learner tests and their subprocess
workers (which import this file by path)."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from seetjax.batch import PreferencePairs, TokenSequences, TrajectoryBatch
from seetjax.learner import LearnerConfig, create_learner, learner_config
from seetjax.models.config import ModelConfig
from seetjax.models.transformer import Transformer
from seetjax.runtime.sharding import make_mesh

VOCAB = 256


def tiny_config(**overrides) -> ModelConfig:
    """Dimensions divisible by 8, so every mesh axis of 8 devices can shard them."""
    fields = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True, tie_word_embeddings=True)
    return ModelConfig(**{**fields, **overrides})


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    return Transformer(tiny_config(**overrides), rngs=nnx.Rngs(seed))


def make_learner(model: Transformer, spec: dict | LearnerConfig, **kw):
    """`create_learner` on one device: the suite runs with 8 simulated devices, and only the
    layout tests want them."""
    config = spec if isinstance(spec, LearnerConfig) else learner_config(spec)
    return create_learner(model, config, mesh=make_mesh(1, 1, 1, jax.devices()[:1]), **kw)


def _episode(rng: np.random.RandomState, length: int) -> tuple[list[int], list[float]]:
    """prompt, a generated turn, a tool output, a second generated turn (ragged, right-padded)."""
    parts = [(rng.randint(3, 7), 0.0), (rng.randint(2, 6), 1.0), (rng.randint(1, 4), 0.0),
             (rng.randint(1, 5), 1.0)]
    tokens, mask = [], []
    for n, m in parts:
        tokens += rng.randint(1, VOCAB, n).tolist()
        mask += [m] * n
    return tokens[:length], mask[:length]


def sequences(rng: np.random.RandomState, rows: int, length: int,
              padding_rows: int = 0) -> TokenSequences:
    episodes = [_episode(rng, length) for _ in range(rows - padding_rows)]
    episodes += [([], [])] * padding_rows
    return TokenSequences.from_rows([e[0] for e in episodes], [e[1] for e in episodes], length)


def rl_batch(seed: int = 0, rows: int = 16, length: int = 24, group: int = 4,
             pairs: int = 0, padding_rows: int = 1) -> TrajectoryBatch:
    """Trajectories in groups of `group` with rewards, sampler logprobs, and optionally
    counterfactual pairs (shared prefix; masks on each step's own tokens)."""
    rng = np.random.RandomState(seed)
    seqs = sequences(rng, rows, length, padding_rows)
    old = np.where(seqs.loss_mask > 0, -rng.rand(rows, length) * 4 - 1, 0).astype(np.float32)
    batch = TrajectoryBatch(sequences=seqs, old_logprobs=old,
                            rewards=rng.randint(0, 3, rows).astype(np.float32),
                            group_ids=(np.arange(rows) // group).astype(np.int32),
                            step_keys=reply_keys(seqs))
    if pairs:
        batch = batch.replace(pairs=preference_pairs(rng, pairs, length))
    return batch


def shared_prefix_batch(seed: int = 0, rows: int = 16, length: int = 48, group: int = 4,
                        pairs: int = 0) -> TrajectoryBatch:
    """`rl_batch` whose rows begin alike, as rollouts' do: each group's rows start with one
    prompt; some rows are branches (another row's tokens up to a point, masked, then their own);
    one row repeats another and one is a strict prefix of another; a padding row. The pairs' chosen
    and rejected rows share their prefix, and pairs share prefixes with each other."""
    rng = np.random.RandomState(seed)
    tokens, masks = [], []
    for i in range(rows - 1):
        if i % group == 0:
            prompt = rng.randint(1, VOCAB, rng.randint(6, 12)).tolist()
        if i % group == 3 and len(tokens[-1]) > len(prompt) + 2:  # a branch of the row before
            cut = rng.randint(len(prompt) + 1, len(tokens[-1]))
            head = tokens[-1][:cut]
            tail = rng.randint(1, VOCAB, rng.randint(2, length - cut)).tolist()
            tokens.append(head + tail)
            masks.append([0.0] * cut + [1.0] * len(tail))
            continue
        episode, mask = _episode(rng, length - len(prompt))
        tokens.append(prompt + episode)
        masks.append([0.0] * len(prompt) + mask)
    tokens[5], masks[5] = list(tokens[4]), list(masks[4])  # a repeated row
    tokens[9], masks[9] = tokens[8][:-2], masks[8][:-2]  # a strict prefix of another row
    seqs = TokenSequences.from_rows(tokens + [[]], masks + [[]], length)
    old = np.where(seqs.loss_mask > 0, -rng.rand(rows, length) * 4 - 1, 0).astype(np.float32)
    batch = TrajectoryBatch(sequences=seqs, old_logprobs=old,
                            rewards=rng.randint(0, 3, rows).astype(np.float32),
                            group_ids=(np.arange(rows) // group).astype(np.int32),
                            step_keys=reply_keys(seqs))
    if pairs:  # half-length pairs (so that they pack), two by two beginning alike
        pair_rows = preference_pairs(rng, pairs, length // 2)
        first = np.asarray(pair_rows.chosen.tokens)[0::2, :4]

        def widen(s: TokenSequences) -> TokenSequences:
            fields = {f: np.pad(np.asarray(getattr(s, f)), ((0, 0), (0, length - length // 2)))
                      for f in ("tokens", "positions", "segment_ids", "loss_mask")}
            fields["tokens"][1::2, :4] = first
            return s.replace(**fields)

        batch = batch.replace(pairs=pair_rows.replace(chosen=widen(pair_rows.chosen),
                                                      rejected=widen(pair_rows.rejected)))
    return batch


def reply_keys(seqs: TokenSequences) -> np.ndarray:
    """[N, T] int32: each run of loss-mask tokens (a generated turn) keyed by its index in the
    row, -1 elsewhere: a group's rows share their states turn by turn (GiGPO's step groups)."""
    mask = np.asarray(seqs.loss_mask) > 0
    starts = mask & ~np.concatenate([np.zeros_like(mask[:, :1]), mask[:, :-1]], axis=1)
    return np.where(mask, np.cumsum(starts, axis=1) - 1, -1).astype(np.int32)


def preference_pairs(rng: np.random.RandomState, count: int, length: int) -> PreferencePairs:
    chosen, rejected, chosen_masks, rejected_masks = [], [], [], []
    for _ in range(count):
        prefix = rng.randint(1, VOCAB, rng.randint(4, length // 2)).tolist()
        for out, masks in ((chosen, chosen_masks), (rejected, rejected_masks)):
            step = rng.randint(1, VOCAB, rng.randint(2, length - len(prefix))).tolist()
            out.append(prefix + step)
            masks.append([0.0] * len(prefix) + [1.0] * len(step))
    weights = rng.rand(count).astype(np.float32) + 0.5
    weights[-1] = 0.0  # a padding pair
    return PreferencePairs(chosen=TokenSequences.from_rows(chosen, chosen_masks, length),
                           rejected=TokenSequences.from_rows(rejected, rejected_masks, length),
                           weights=weights)


# The objective the layout tests compare across devices and processes: a policy loss with the KL
# to an in-step reference, plus the counterfactual term with its preference part.
PARITY_CONFIG = {"algorithm": "grpo", "micro_batches": 2, "counterfactual_weight": 0.5,
                 "counterfactual": {"preference_weight": 1.0}}


def parity_batch() -> TrajectoryBatch:
    return rl_batch(seed=11, rows=16, pairs=16)


def flat_arrays(tree) -> dict[str, np.ndarray]:
    """Path -> numpy array of every leaf (comparisons across runs and processes)."""
    return {jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def assert_same_update(expected: tuple, actual: tuple) -> None:
    """Two `Learner.gradients` results (gradients, metrics) agree to float rounding, and the
    gradients are not all ~0 (a comparison of nothing)."""
    (grads, metrics), (other_grads, other_metrics) = expected, actual
    assert metrics.keys() == other_metrics.keys()
    for key in metrics:
        np.testing.assert_allclose(other_metrics[key], metrics[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)
    a, b = flat_arrays(grads), flat_arrays(other_grads)
    assert max(np.abs(v).max() for v in a.values()) > 1e-3
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=key)


# Learner specs whose code paths the algorithm presets leave out: with the presets, every loss
# term and estimator, and every reader of the model's outputs (entropy, KL, TIS, values, pairs).
VARIANTS = [
    {**PARITY_CONFIG, "micro_batches": 4},  # counterfactual + its preference, accumulation
    {"algorithm": "grpo", "loss": {"kl_in_reward": True, "kl_estimator": "k1", "kl_coef": 0.1},
     "advantage": {"std": "batch"}},
    {"algorithm": "rloo", "loss": {"tis_cap": 2.0, "entropy_coef": 0.01}, "mini_batches": 2},
    {"algorithm": "reinforce", "loss": {"kl_coef": 0.1, "kl_estimator": "k2"},
     "advantage": {"baseline": "none"}, "micro_batches": 2},
    {"algorithm": "ppo", "micro_batches": 2, "advantage": {"gamma": 0.9}},
    {"algorithm": "dpo", "loss": {"kind": "hinge"}, "micro_batches": 2},
    {"algorithm": "sft", "loss": {"aggregation": "seq-mean-token-mean"}, "micro_batches": 2},
]


def widened(batch, width=48):
    """The batch with its rows right-padded to `width`, as a rollout pads episodes to the run's
    row length (so that they pack)."""
    def pad(x):
        return np.pad(np.asarray(x), ((0, 0), (0, width - np.shape(x)[1])))

    seqs = lambda s: s.replace(**{f: pad(getattr(s, f)) for f in  # noqa: E731
                                  ("tokens", "positions", "segment_ids", "loss_mask")})
    keys = np.pad(batch.step_keys, ((0, 0), (0, width - batch.step_keys.shape[1])),
                  constant_values=-1)
    return batch.replace(sequences=seqs(batch.sequences), old_logprobs=pad(batch.old_logprobs),
                         step_keys=keys, pairs=batch.pairs.replace(chosen=seqs(batch.pairs.chosen),
                                                   rejected=seqs(batch.pairs.rejected)))


def spec_id(spec: dict) -> str:
    """A readable test id for a learner spec."""
    return "-".join([spec["algorithm"]] + sorted(k for k in spec if k != "algorithm"))


def moved_off_reference(state):
    """The state with its parameters moved off the reference's, so that KL terms, their
    gradients and DPO margins are not at their ties (0 at the reference)."""
    leaves, tree = jax.tree.flatten(state.params)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    return state.replace(params=jax.tree.unflatten(tree, [
        x + 0.02 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]))
