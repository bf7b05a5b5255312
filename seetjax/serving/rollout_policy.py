"""The serving engine as a rollout's model: `EnginePolicy` is what `RolloutConfig.mode="engine"`
plays with (`seetjax.rollout.engine_play`, its `ReplyEngine`). Each episode's next reply is one
request, token-in (the whole conversation; the engine's prefix cache holds the episode's finished
conversation, so only the new observation is prefilled) and token-out (ids, log-probs under the
sampling temperature, and the weight version of every token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from seetjax.errors import require
from seetjax.sampling import Completion, SamplingParams
from seetjax.serving.engine import Engine
from seetjax.serving.requests import ErrorEvent, Event, GenerationParams, RequestDone


class EnginePolicy:
    """`engine` sampling with `sampling`'s settings; `seed` is the rollout's (each request's own
    seed is drawn from it and its episode by `seetjax.rollout.engine_play`). Starts the engine's
    decode thread. Weights change through `update_weights` (the engine's: between decode chunks,
    stale prefix-cache entries dropped)."""

    def __init__(self, engine: Engine, sampling: SamplingParams, seed: int):
        require(isinstance(seed, int), self, "seed", seed, "must be an int")
        self.engine, self.sampling, self.seed = engine.start(), sampling, seed

    @property
    def version(self) -> int:
        """The weight version the engine samples with."""
        return self.engine.weight_version

    def update_weights(self, params, version: int) -> None:
        """Samples with `params`, of weight `version`, from the engine's next decode chunk on."""
        self.engine.update_weights(params, version)

    def reserve(self, sequences: int) -> None:
        self.engine.reserve(sequences)

    def counters(self) -> tuple[float, int]:
        """(the engine's busy seconds, its decode row-steps) so far."""
        return self.engine.stats.busy_s, self.engine.stats.row_steps

    def submit(self, tokens: Sequence[int], max_tokens: int, seed: int,
               done: Callable[[Completion | None, str | None], None]) -> None:
        """Queues one reply after `tokens`; `done(completion, None)` or `done(None, error)` is
        called on the engine's thread when it ends."""
        s = self.sampling
        params = GenerationParams(max_tokens=max_tokens, temperature=s.temperature, top_p=s.top_p,
                                  top_k=s.top_k, seed=seed)

        def on_event(event: Event) -> None:
            if isinstance(event, RequestDone):
                c = event.output.choices[0]
                done(Completion(c.token_ids, c.logprobs, c.finish_reason, c.versions), None)
            elif isinstance(event, ErrorEvent):
                done(None, event.message)

        self.engine.submit(tokens, params, on_event)
