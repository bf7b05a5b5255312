"""A character automaton (`json_grammar.NFA`) as a token-level state machine the decode chunk
applies as a logit mask: `table[state, token]` is the state after emitting `token`, or -1 where
the token would leave the language (as Outlines' index, Willard & Louf 2023, "Efficient Guided
Generation for Large Language Models"). Stop tokens are allowed only in accepting states.

States are the subsets of NFA states reached at token boundaries (the subset construction, run
lazily over a trie of the vocabulary, so one walk covers every token sharing a prefix).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from seetjax.errors import invalid
from seetjax.sampling.sampler import bucket
from seetjax.serving.json_grammar import NFA


@dataclasses.dataclass
class _Trie:
    children: dict[str, _Trie] = dataclasses.field(default_factory=dict)
    ids: list[int] = dataclasses.field(default_factory=list)


class Vocabulary:
    """The texts a model's tokens write (None: a token constrained decoding never picks: a
    special token, an empty or partial UTF-8 piece) and its stop tokens, as a trie."""

    def __init__(self, texts: Sequence[str | None], stop_ids: Sequence[int], size: int):
        if size < len(texts):
            raise invalid(self, "size", size, f"below the {len(texts)} token texts")
        self.size, self.stop_ids = size, tuple(stop_ids)
        self.texts = list(texts)
        self.root = _Trie()
        for token, text in enumerate(texts):
            if not text or token in self.stop_ids:
                continue
            node = self.root
            for char in text:
                node = node.children.setdefault(char, _Trie())
            node.ids.append(token)


@dataclasses.dataclass(frozen=True, eq=False)
class TokenFSM:
    """table [states, vocab] int32: next state, -1 for a token not allowed; state 0 starts."""

    table: np.ndarray

    @property
    def num_states(self) -> int:
        return self.table.shape[0]

    def advance(self, state: int, tokens: Sequence[int]) -> int:
        """The state after `tokens` (-1 once one is not allowed)."""
        for token in tokens:
            if state < 0:
                break
            state = int(self.table[state, token])
        return state


def compile_fsm(nfa: NFA, vocab: Vocabulary, markers: Sequence[int] = (),
                max_states: int = 4096) -> TokenFSM:
    """The token table of `nfa` over `vocab`. `markers`, a chat template's own tokens
    (`<tool_call>`, ...), are taken only where their whole text runs through the NFA's marked
    literals (a forced call's opening and closing), never inside a value: there their text would
    pass as a string's characters, and a model can write them until its token limit. Raises
    ValueError past `max_states` states (a schema too large to hold as a mask)."""
    subsets: dict[frozenset[int], int] = {}  # every subset met, mid-token ones too
    by_id: list[frozenset[int]] = []
    memo: dict[tuple[int, str], int] = {}
    dead = -1
    markers = [t for t in markers if t < vocab.size]

    def intern(subset: frozenset[int]) -> int:
        if not subset:
            return dead
        if subset not in subsets:
            subsets[subset] = len(by_id)
            by_id.append(subset)
        return subsets[subset]

    def step(sid: int, char: str) -> int:
        key = (sid, char)
        if key not in memo:
            memo[key] = intern(nfa.step(by_id[sid], char))
        return memo[key]

    def row_of(sid: int) -> int:
        """The table row of a subset met at a token boundary, queued when new."""
        if sid not in rows:
            if len(order) >= max_states:
                raise ValueError(f"compile_fsm.max_states={max_states}: the grammar needs "
                                 "more token states")
            rows[sid] = len(order)
            order.append(sid)
        return rows[sid]

    def marker_step(subset: frozenset[int], text: str) -> int:
        for char in text:
            subset = nfa.step(subset, char, marked=True)
        return intern(subset)

    start = intern(nfa.closure([nfa.start]))
    rows: dict[int, int] = {}  # subset id -> table row, for subsets at token boundaries
    order: list[int] = []
    row_of(start)
    table_rows: list[np.ndarray] = []
    while len(table_rows) < len(order):
        sid = order[len(table_rows)]
        row = np.full((vocab.size,), -1, np.int32)
        stack = [(vocab.root, sid)]
        while stack:
            node, at = stack.pop()
            for char, child in node.children.items():
                nxt = step(at, char)
                if nxt == dead:
                    continue
                if child.ids:
                    row[child.ids] = row_of(nxt)
                stack.append((child, nxt))
        for token in markers:
            text = vocab.texts[token] if token < len(vocab.texts) else None
            nxt = marker_step(by_id[sid], text) if text else dead
            row[token] = dead if nxt == dead else row_of(nxt)
        if nfa.final in by_id[sid]:
            row[list(vocab.stop_ids)] = rows[sid]  # the reply may end here
        table_rows.append(row)
    return TokenFSM(np.stack(table_rows))


def stack_tables(fsms: Sequence[TokenFSM], min_states: int = 64) -> tuple[list[int], np.ndarray]:
    """One table for several automata (each one's states offset past the previous ones'), in
    a power-of-two number of states (at least `min_states`) so few shapes compile: the state
    offsets, and the table."""
    offsets = [0]
    for fsm in fsms[:-1]:
        offsets.append(offsets[-1] + fsm.num_states)
    total = offsets[-1] + fsms[-1].num_states
    table = np.full((bucket(total, min_states), fsms[0].table.shape[1]), -1, np.int32)
    for offset, fsm in zip(offsets, fsms):
        table[offset:offset + fsm.num_states] = np.where(fsm.table >= 0, fsm.table + offset, -1)
    return offsets, table
