"""`TrajectoryBatch`: the one contract between the Python rollout side and the jitted learner.

Arrays only, static shapes, a pytree (`flax.struct`): rollout writes it, the learner reads it, and
neither imports the other. B rows (one trajectory per row for RL), T tokens per row, P preference
pairs of Tp tokens each. The rollout pads B and T to a few bucketed sizes; every distinct shape (and
every distinct set of present optional fields) compiles the learner's step once.

Alignment: every per-token array is aligned with `tokens`. Entry t belongs to token t, which the
model predicts from tokens [0, t) of its segment, so t = 0 (and every segment start) never carries
a loss. Padding is segment id 0.

Packing: rows may carry a `Packing`, the same rows' tokens laid several to a row for the model
pass only (`seetjax.learner.packing`); every per-token and per-row array, and every loss, stays in
the row layout above, the model's outputs being gathered back into it (`Packing.unpack`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array


@struct.dataclass
class TokenSequences:
    """Token rows as the model consumes them.

    tokens:      [N, T] int32  token ids (padding: any id, conventionally the pad id)
    positions:   [N, T] int32  position of each token within its segment (RoPE)
    segment_ids: [N, T] int32  0 = padding; equal non-zero ids attend to each other causally
                                (one trajectory per row uses 1; packed SFT rows use 1, 2, ...)
    loss_mask:   [N, T] f32    1.0 on tokens the policy generated (or, for SFT, the targets),
                                0.0 on prompts, tool outputs, hints and padding
    packing:     optional `Packing` of these rows: the model runs on it instead
    target_width: static, not an array (each value compiles once): K > 0 has the model pass
                  compute the LM head only at the positions that predict each row's target
                  tokens (`target_mask`), K per row, every row having at most K; 0: everywhere
    """

    tokens: Array
    positions: Array
    segment_ids: Array
    loss_mask: Array
    packing: Packing | None = None
    target_width: int = struct.field(pytree_node=False, default=0)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)

    @classmethod
    def from_rows(cls, tokens: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[float]],
                  length: int, pad_id: int = 0) -> TokenSequences:
        """Right-pads one trajectory per row to `length` (numpy arrays: cheap to build on the
        host, placed on devices by the learner)."""
        n = len(tokens)
        out_tokens = np.full((n, length), pad_id, np.int32)
        positions = np.zeros((n, length), np.int32)
        segments = np.zeros((n, length), np.int32)
        masks = np.zeros((n, length), np.float32)
        for i, (row, mask) in enumerate(zip(tokens, loss_masks, strict=True)):
            if len(row) != len(mask) or len(row) > length:
                raise ValueError(f"row {i}: {len(row)} tokens, {len(mask)} mask entries, "
                                 f"length {length}")
            out_tokens[i, :len(row)] = row
            positions[i, :len(row)] = np.arange(len(row))
            segments[i, :len(row)] = 1
            masks[i, :len(row)] = mask
        return cls(tokens=out_tokens, positions=positions, segment_ids=segments, loss_mask=masks)


@struct.dataclass
class Packing:
    """The tokens of N rows [N, T] packed into R <= N rows [R, L] for the model pass: each row's
    content copied verbatim (positions kept, segment ids shifted past the ones already in its
    packed row), so causal same-segment attention gives every token the hidden state it has in
    its own row. With a `tree`, rows that begin alike share the slots of their common leading
    tokens instead (`PrefixTree`): the model computes each distinct prefix once.

    rows:  TokenSequences [R, L]  the packed rows (loss_mask carried along, unused by the model;
                                  with a tree: 1.0 on the slots of target tokens); None for
                                  pairs laid in the trajectories' packed rows (`index` then
                                  points there: the model's pass over them serves both)
    index: [N, T] int32           for each token of the N rows whose model output is read (t >= 1
                                  and not padding), its flat slot r * L + l in `rows`; elsewhere
                                  R * L, a slot whose outputs are 0 (as `shift_right` gives t = 0)
    tree:  PrefixTree or None     the shared layout's attention and prediction structure

    Split into chunks by rows, `rows` and `index` stay consistent when every chunk's rows are
    packed into that chunk's packed rows and `index` counts slots within the chunk (the packer
    guarantees it for the learner's chunking).
    """

    rows: TokenSequences | None
    index: Array
    tree: PrefixTree | None = None

    def unpack(self, values: Array) -> Array:
        """Per-slot values [R, L, ...] of the packed rows -> [N, T, ...] in the row layout:
        out[n, t] = values.flat[index[n, t]], and 0 where index is R * L."""
        flat = values.reshape(-1, *values.shape[2:])
        flat = jnp.concatenate([flat, jnp.zeros_like(flat[:1])])
        return flat[self.index]


@struct.dataclass
class PrefixTree:
    """Packed rows in which sequences that begin alike hold their common leading tokens once
    (`Packing.tree`, `seetjax.learner.packing.pack_shared_rows`): a forest of token spans.

    Each span (a node) is a run of consecutive slots. The packed rows' segment ids number the
    nodes in depth-first preorder (1, 2, ... within a packed row; 0: padding) and `ends` holds,
    on every slot of a node, one past the largest number in its subtree, so slot j is visible
    from slot i when j <= i and ids[j] <= ids[i] < ends[j]: a node sees itself causally and its
    ancestors whole, which are exactly the tokens before it in each of its sequences (nested
    intervals; a forest of one-node trees is the plain same-segment mask). A sequence's token is
    predicted from the slot `previous` names, the parent's last slot at a node's start.

    ends:     [R, L] int32  see above (0 on padding)
    previous: [R, L] int32  the slot, in the same packed row, of the token before this one in
                            its sequences; -1 at a sequence's first token and on padding
    """

    ends: Array
    previous: Array


@struct.dataclass
class PreferencePairs:
    """P pairs of sequences, `chosen` preferred to `rejected`.

    For SEET's slow loop (the counterfactual loss) chosen is the anchor step and rejected the
    failed step, both written after the same shared failing prefix; their loss masks cover only
    the step's own tokens, so prefix tokens never count.

    chosen, rejected: TokenSequences of shape [P, Tp]
    weights:          [P] f32   per-pair weight; 0.0 marks a padding pair
    ref_chosen:       [P] f32   optional: reference-model log-likelihood of chosen's masked tokens
    ref_rejected:     [P] f32   optional: the same for rejected (computed in-step when absent)
    """

    chosen: TokenSequences
    rejected: TokenSequences
    weights: Array
    ref_chosen: Array | None = None
    ref_rejected: Array | None = None


@struct.dataclass
class TrajectoryBatch:
    """Everything the learner's step consumes. Which fields must be present depends on the loss
    terms configured (the learner validates this before compiling and names a missing field).

    sequences:     TokenSequences [B, T]  the trajectories (or SFT dialogs)
    old_logprobs:  [B, T] f32  logprob of each generated token under the sampler that drew it
                               (`sample_next_token`'s output: softmax(logits / temperature));
                               0.0 where loss_mask is 0
    ref_logprobs:  [B, T] f32  optional: logprobs under the frozen reference policy (KL);
                               computed in-step from the reference parameters when absent
    rewards:       [B] f32     optional: one scalar reward per trajectory (its return: the sum
                               of its token rewards when those are given)
    token_rewards: [B, T] f32  optional: each reward on the token it scores, the last generated
                               token of the reply it rewards (an episode reward: of the last
                               reply); 0.0 elsewhere. Absent: `rewards` on each row's last
                               loss-mask token (`seetjax.losses.advantages.outcome_rewards`)
    reward_mask:   [B, T] f32  with token_rewards: 1.0 on the tokens that carry a reward (a
                               reward may be 0.0: GRPO's normalisation counts it), 0.0 elsewhere
    group_ids:     [B] int32   optional: rows with equal ids were sampled for the same task
                               (GRPO / RLOO groups); any integers
    step_keys:     [B, T] int32 optional: on every token of each reply in the row, the key of the
                               environment state the reply was sampled from (equal keys, equal
                               states: `seetjax.envs.state_keys`; any integers), -1 elsewhere;
                               two replies always have other tokens between them. GiGPO's step
                               groups (`seetjax.losses.gigpo.gigpo_advantages`)
    turn_starts:   [B, T] f32  optional: 1.0 on the token after each reply that ended a turn
                               (what follows belongs to the next turn: a cut-off reply's
                               closing token, the tool outputs and the next request), 0.0
                               elsewhere; advantages with horizon 'turn' end returns there
    versions:      [B, T] int32 optional: the policy weight version that sampled each token
                               (the learner's update count of the sampler's weights), -1 on
                               tokens not sampled (prompts, observations, padding); a row may
                               span versions. Bookkeeping: no loss reads it
    advantages:    [B] f32     optional: precomputed per-trajectory advantages; when present the
                               configured estimator is not run
    old_values:    [B, T] f32  optional: value estimates of the behaviour policy (PPO); computed
                               in-step before the update when absent
    pairs:         PreferencePairs or None: DPO pairs or SEET counterfactual pairs

    A row whose segment ids are all 0 is a padding row: it counts in no loss, group or metric.
    """

    sequences: TokenSequences | None = None
    old_logprobs: Array | None = None
    ref_logprobs: Array | None = None
    rewards: Array | None = None
    token_rewards: Array | None = None
    reward_mask: Array | None = None
    group_ids: Array | None = None
    step_keys: Array | None = None
    turn_starts: Array | None = None
    versions: Array | None = None
    advantages: Array | None = None
    old_values: Array | None = None
    pairs: PreferencePairs | None = None


def row_mask(sequences: TokenSequences) -> Array:
    """[N] f32: 1.0 for rows holding at least one real token."""
    return jnp.any(sequences.segment_ids != 0, axis=-1).astype(jnp.float32)


def target_mask(sequences: TokenSequences) -> Array:
    """[N, T] f32: the loss mask restricted to tokens that have a predecessor in their segment
    (a segment's first token is never predicted)."""
    seg = sequences.segment_ids
    has_prev = jnp.concatenate([jnp.zeros_like(seg[:, :1], bool), seg[:, 1:] == seg[:, :-1]],
                               axis=1) & (seg != 0)
    return sequences.loss_mask.astype(jnp.float32) * has_prev


def tree_targets(rows: TokenSequences, tree: PrefixTree) -> Array:
    """[R, L] f32: the slots of packed rows sharing prefixes that hold a target token of some
    row (the packer's loss mask there) and are predicted from another slot."""
    return rows.loss_mask.astype(jnp.float32) * (tree.previous >= 0)
