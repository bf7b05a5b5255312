"""The rehearsal buffer: reservoir uniformity, recency, JSON state, and its use across stages."""

import json

import numpy as np
import pytest

from seetjax.data.pipeline import PipelineConfig, SFTPipeline
from seetjax.data.replay import ReplayBuffer
from tests.data.conftest import make_examples

STREAM = make_examples(400, max_len=8)


def test_reservoir_keeps_a_uniform_sample_of_the_stream():
    # Each of 400 offers should be held with probability capacity / 400 = 0.1.
    held = np.zeros(len(STREAM))
    trials = 300
    for seed in range(trials):
        buffer = ReplayBuffer(40, "reservoir", seed=seed)
        buffer.add(STREAM[:150])
        buffer.add(STREAM[150:])  # offers in two calls are one stream
        assert len(buffer) == 40 and buffer.offered == 400
        for e in buffer.items:
            held[int(e.id[1:])] += 1
    rate = held / trials
    assert rate.mean() == pytest.approx(0.1)
    # early and late offers alike (a recency bias would starve the first quarter)
    quarters = rate.reshape(4, 100).mean(1)
    np.testing.assert_allclose(quarters, 0.1, atol=0.01)


def test_recency_keeps_the_last_offers_in_order():
    buffer = ReplayBuffer(5, "recency")
    buffer.add(STREAM[:3])
    assert [e.id for e in buffer.items] == ["e0", "e1", "e2"]
    buffer.add(STREAM[3:12])
    assert [e.id for e in buffer.items] == ["e7", "e8", "e9", "e10", "e11"]


@pytest.mark.parametrize("policy", ["reservoir", "recency"])
def test_state_round_trips_through_json(policy):
    buffer = ReplayBuffer(10, policy, seed=3)
    buffer.add(STREAM[:50])
    state = json.loads(json.dumps(buffer.state_dict()))
    restored = ReplayBuffer.from_state(state, {e.id: e for e in STREAM})
    assert [e.id for e in restored.items] == [e.id for e in buffer.items]
    buffer.add(STREAM[50:90])
    restored.add(STREAM[50:90])  # continues exactly as the original would
    assert [e.id for e in restored.items] == [e.id for e in buffer.items]
    with pytest.raises(ValueError, match="example ids not in the data"):
        ReplayBuffer.from_state(state, {})
    with pytest.raises(ValueError, match="'offered' missing"):
        ReplayBuffer.from_state({k: v for k, v in state.items() if k != "offered"}, {})


def test_bad_settings_fail():
    with pytest.raises(ValueError, match="capacity=0"):
        ReplayBuffer(0)
    with pytest.raises(ValueError, match="ReplayBuffer.policy='lru': one of"):
        ReplayBuffer(3, "lru")


def test_continual_stages_replay_earlier_stages_at_the_ratio():
    """Stage 2 trains on its own examples plus 25% replayed ones from stage 1's memory."""
    stage1, stage2 = make_examples(30, prefix="a"), make_examples(30, seed=1, prefix="b")
    buffer = ReplayBuffer(8, "reservoir")
    buffer.add(stage1)
    pipeline = SFTPipeline(stage2, PipelineConfig(seq_len=64, batch_size=4, replay_ratio=0.25),
                           replay=buffer.items)
    records = pipeline.records()
    replayed = [i for i in range(4000) if records[i]["replay"][0]]
    assert len(replayed) / 4000 == pytest.approx(0.25, abs=0.01)
    memory = {tuple(e.tokens) for e in buffer.items}
    assert {tuple(records[i]["tokens"]) for i in replayed} == memory  # all of it, only it
