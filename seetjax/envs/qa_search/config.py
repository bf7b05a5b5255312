"""The QA search environment's settings (`QASearchConfig`): episode, reward and retriever, each
field checked on construction. A leaf: the environment (`env.py`) reads it, it reads no episode.
"""

from __future__ import annotations

import dataclasses

from seetjax.envs.qa_search.retriever import RetrieverSettings
from seetjax.envs.qa_search.reward import RewardWeights
from seetjax.errors import invalid, require_int
from seetjax.tools.calls import MAX_MESSAGE_CHARS

# prompt style -> the call format it teaches (as in BfclEnvConfig: compact teaches python calls,
# native the chat template's <tool_call> blocks).
CALL_FORMATS = {"compact": "python", "native": "hermes"}


@dataclasses.dataclass(frozen=True)
class QASearchConfig:
    """Episode, reward and retriever settings; `__post_init__` names the field that is wrong.

    search_budget: searches an episode may run. default_k, max_k: results per search when k is
      not given, and the most a call may ask for. max_steps: replies per episode.
    snippet_words: words of each result's chunk shown. retrieval_mask_ratio, mask_seed: the
      share of those words masked per search and the seed of the choice.
    em_weight .. timeout_penalty: `reward.RewardWeights`. retriever .. encoder:
      `retriever.RetrieverSettings` (retriever is its kind: bm25, dense or hybrid).
    oracle_spaced_answer: the oracle (its demonstrations, and the gold calls of a trace) writes
      its answer after a space, as the answer is spelled inside a passage, so a BPE tokenizer
      gives it the passage's tokens: at a string's start a word splits differently (the embedded
      tokenizer: "engineer" is en+gine+er, " engineer" in a passage " engine"+"er"), and a model
      that copies from the passage needs the same tokens. EM and F1 ignore the space. In the
      oracle team's dialogs a worker's spaced answer reaches the coordinator as it is, and the
      coordinator's final answer repeats it.
    oracle_recheck: the share of the oracle's demonstrations (a seeded draw per task,
      `oracle.oracle_calls`) that run the last hop's search once more before answering. That
      search is redundant: it returns what the first one did. It stands for the over-searching an
      SFT teacher passes on, which the search cost should price away (README, "QA search"). The
      gold calls of a trace never recheck.
    """

    prompt_style: str = "compact"
    search_budget: int = 6
    default_k: int = 5
    max_k: int = 10
    max_steps: int = 10
    snippet_words: int = 80
    format_error_ends_episode: bool = False
    retrieval_mask_ratio: float = 0.0
    mask_seed: int = 0
    em_weight: float = 1.0
    f1_weight: float = 0.0
    format_weight: float = 0.1
    search_cost: float = 0.0
    timeout_penalty: float = 0.5
    retriever: str = "bm25"
    chunk_words: int = 100
    chunk_overlap: int = 20
    rrf_k: int = 60
    fusion_depth: int = 50
    encoder: str = ""
    max_message_chars: int = MAX_MESSAGE_CHARS
    oracle_spaced_answer: bool = False
    oracle_recheck: float = 0.0

    def __post_init__(self):
        if not isinstance(self.oracle_spaced_answer, bool):
            raise invalid(self, "oracle_spaced_answer", self.oracle_spaced_answer,
                          "must be True or False")
        if self.prompt_style not in CALL_FORMATS:
            raise invalid(self, "prompt_style", self.prompt_style, f"one of {tuple(CALL_FORMATS)}")
        for name, least in (("search_budget", 1), ("default_k", 1), ("max_steps", 1),
                            ("snippet_words", 1), ("max_message_chars", 1), ("mask_seed", 0)):
            require_int(self, name, getattr(self, name), least)
        if not isinstance(self.max_k, int) or isinstance(self.max_k, bool) or \
                self.max_k < self.default_k:
            raise invalid(self, "max_k", self.max_k, "must be an integer >= default_k="
                             f"{self.default_k}")
        ratio = self.retrieval_mask_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise invalid(self, "retrieval_mask_ratio", ratio, "must be a number in [0, 1)")
        share = self.oracle_recheck
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise invalid(self, "oracle_recheck", share, "must be a number in [0, 1]")
        _ = self.weights, self.retrieval  # their __post_init__ check the other fields

    @property
    def weights(self) -> RewardWeights:
        return RewardWeights(self.em_weight, self.f1_weight, self.format_weight,
                             self.search_cost, self.timeout_penalty)

    @property
    def retrieval(self) -> RetrieverSettings:
        return RetrieverSettings(self.retriever, self.chunk_words, self.chunk_overlap, self.rrf_k,
                                 self.fusion_depth, self.encoder)

    @property
    def call_format(self) -> str:
        return CALL_FORMATS[self.prompt_style]
