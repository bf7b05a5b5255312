"""The learner scores sampled tokens exactly as the sampler reported them."""

import jax
import numpy as np
from learner_testlib import make_learner, tiny_model

from seetjax.batch import TokenSequences
from seetjax.sampling import Sampler, SamplingParams


def test_learner_logprobs_equal_sampler_logprobs():
    model = tiny_model(num_layers=1)
    temperature = 0.7
    learner, state = make_learner(model, {"algorithm": "grpo",
                                                           "temperature": temperature})
    sampler = Sampler(learner.model(state), pad_id=0, min_steps=8)
    rng = np.random.RandomState(0)
    prompts = [rng.randint(1, 256, n).tolist() for n in (5, 9, 3, 7)]
    seqs = sampler.prefill(learner.sampling_params(state), prompts)
    _, completions = sampler.generate(learner.sampling_params(state), seqs, jax.random.key(1), 12,
                                      stop_ids=[-1], sampling=SamplingParams(temperature, top_k=50))
    rows = [p + c.tokens for p, c in zip(prompts, completions)]
    masks = [[0.0] * len(p) + [1.0] * len(c.tokens) for p, c in zip(prompts, completions)]
    learner_lp = np.asarray(learner.logprobs(state, TokenSequences.from_rows(rows, masks, 32)))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        np.testing.assert_allclose(learner_lp[i, len(p):len(p) + len(c.tokens)], c.logprobs,
                                   atol=1e-5)
