"""The grain pipeline: static shapes, intact segments, exact resume, sharding, weights, replay."""

import json

import numpy as np
import pytest

from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.pipeline import BATCH_FIELDS, PipelineConfig, SFTPipeline, segment_counts
from seetjax.data.weighting import DEFAULT_TASK_WEIGHTS, effective_weights
from tests.data.conftest import make_examples

EXAMPLES = make_examples(60)
BY_ID = {e.id: e for e in EXAMPLES}


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def segments(batch):
    """(row, tokens, loss_mask, task id, replay) of every segment of a batch."""
    out = []
    for r in range(batch["tokens"].shape[0]):
        seg = batch["segment_ids"][r]
        for s in np.unique(seg[seg > 0]):
            at = seg == s
            np.testing.assert_array_equal(batch["positions"][r][at], np.arange(at.sum()))
            out.append((r, batch["tokens"][r][at], batch["loss_mask"][r][at],
                        int(batch["task_ids"][r][at][0]), int(batch["replay"][r][at][0])))
    return out


def find(tokens):
    matches = [e for e in EXAMPLES if np.array_equal(e.tokens, tokens)]
    assert len(matches) == 1
    return matches[0]


@pytest.mark.parametrize("packing", [True, False])
def test_batches_have_static_shapes_and_carry_examples_intact(packing):
    config = PipelineConfig(seq_len=64, batch_size=4, packing=packing, pad_id=7)
    batches = take(iter(SFTPipeline(EXAMPLES, config)), 6)
    for batch in batches:
        assert tuple(batch) == BATCH_FIELDS
        assert all(batch[k].shape == (4, 64) for k in BATCH_FIELDS)
        assert batch["loss_mask"].dtype == np.float32 and batch["tokens"].dtype == np.int32
        padding = batch["segment_ids"] == 0
        assert (batch["tokens"][padding] == 7).all() and (batch["task_ids"][padding] == -1).all()
        assert not batch["loss_mask"][padding].any()
        found = segments(batch)
        assert (max(len([f for f in found if f[0] == r]) for r in range(4)) > 1) == packing
        for _, tokens, mask, task, replay in found:
            example = find(tokens)
            np.testing.assert_array_equal(mask, example.loss_mask)
            assert TASK_TYPES[task] == example.task_type and replay == 0


@pytest.mark.parametrize("settings", [dict(packing=True), dict(packing=False),
                                      dict(packing=True, prefetch=2, replay_ratio=0.3)])
def test_resume_mid_epoch_gives_the_identical_remaining_stream(settings):
    config = PipelineConfig(seq_len=64, batch_size=4, packing_bins=6, **settings)
    pipeline = SFTPipeline(EXAMPLES[10:], config, replay=EXAMPLES[:10])
    iterator = iter(pipeline)
    take(iterator, 7)  # 7 batches in: mid-epoch (~50 examples of the 60 read) and mid packing
    state = json.loads(json.dumps(iterator.get_state()))  # as a checkpoint stores it
    expected = take(iterator, 12)
    resumed = iter(SFTPipeline(EXAMPLES[10:], config, replay=EXAMPLES[:10]))
    resumed.set_state(state)
    for a, b in zip(expected, take(resumed, 12)):
        for k in BATCH_FIELDS:
            np.testing.assert_array_equal(a[k], b[k])


def test_the_stream_is_deterministic_in_the_seed():
    def first(seed):
        return next(iter(SFTPipeline(EXAMPLES, PipelineConfig(seq_len=64, batch_size=4, seed=seed))))

    np.testing.assert_array_equal(first(0)["tokens"], first(0)["tokens"])
    assert not np.array_equal(first(0)["tokens"], first(1)["tokens"])


def test_processes_read_disjoint_interleaved_shards():
    config = PipelineConfig(seq_len=64, batch_size=4)
    whole = SFTPipeline(EXAMPLES, config, process_index=0, process_count=1).records()
    shards = [SFTPipeline(EXAMPLES, config, process_index=p, process_count=2).records()
              for p in range(2)]
    for i in range(100):
        np.testing.assert_array_equal(shards[i % 2][i // 2]["tokens"], whole[i]["tokens"])
    rows = SFTPipeline(EXAMPLES, config, process_index=1, process_count=2)
    assert next(iter(rows))["tokens"].shape == (2, 64)
    with pytest.raises(ValueError, match="multiple of the process count 3"):
        SFTPipeline(EXAMPLES, config, process_index=0, process_count=3)


def test_without_weights_every_example_appears_once_per_epoch():
    config = PipelineConfig(seq_len=64, batch_size=4, task_weights=None, shuffle_window=0)
    records = SFTPipeline(EXAMPLES, config).records()
    for epoch in range(2):
        ids = sorted(find(records[epoch * 60 + i]["tokens"]).id for i in range(60))
        assert ids == sorted(BY_ID)
    first = [find(records[i]["tokens"]).id for i in range(60)]
    assert first != [find(records[60 + i]["tokens"]).id for i in range(60)]  # reshuffled


@pytest.mark.parametrize("weights", [DEFAULT_TASK_WEIGHTS,
                                     {"tool_selection": 0.1, "multi_step_planning": 0.6,
                                      "timing_decision": 0.3}])
def test_task_weights_are_observed_on_a_large_sample(weights):
    # Unbalanced on purpose: 5 tool_selection examples, 40 multi_step ones, ...
    examples = (make_examples(5, task_types=("tool_selection",), prefix="s")
                + make_examples(40, task_types=("multi_step_planning",), prefix="m")
                + make_examples(12, task_types=("timing_decision",), prefix="t")
                + make_examples(3, task_types=("tool_retrieval",), prefix="r"))
    records = SFTPipeline(examples, PipelineConfig(seq_len=64, batch_size=4,
                                                   task_weights=weights)).records()
    n = 20_000
    counts = np.bincount([records[i]["task_ids"][0] for i in range(n)], minlength=4)
    expected = effective_weights({t: 1 for t in TASK_TYPES}, weights)
    for t, share in zip(TASK_TYPES, counts / n):
        assert share == pytest.approx(expected.get(t, 0.0), abs=0.01), t
    # the same holds in the batches the trainer sees
    iterator = iter(SFTPipeline(examples, PipelineConfig(seq_len=64, batch_size=8,
                                                         task_weights=weights)))
    per_task = np.zeros(4)
    for _ in range(150):
        per_task += list(segment_counts(next(iterator))["per_task"].values())
    for t, share in zip(TASK_TYPES, per_task / per_task.sum()):
        assert share == pytest.approx(expected.get(t, 0.0), abs=0.02), t


def test_a_weighted_type_without_examples_is_logged_and_left_out(caplog):
    examples = make_examples(20, task_types=("tool_selection", "timing_decision"))
    pipeline = SFTPipeline(examples, PipelineConfig(seq_len=64, batch_size=4))
    assert pipeline.weights == pytest.approx({"tool_selection": 0.35 / 0.55,
                                              "timing_decision": 0.20 / 0.55})
    assert "no examples of ['multi_step_planning', 'tool_retrieval']" in caplog.text
    with pytest.raises(ValueError, match="no examples of any weighted type"):
        SFTPipeline(examples, PipelineConfig(seq_len=64, batch_size=4, task_weights={
            "tool_retrieval": 1.0}))


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_replay_ratio_is_observed(ratio):
    new, old = make_examples(40, prefix="new"), make_examples(15, seed=1, prefix="old")
    pipeline = SFTPipeline(new, PipelineConfig(seq_len=64, batch_size=8, replay_ratio=ratio),
                           replay=old)
    records = pipeline.records()
    flags = np.array([records[i]["replay"][0] for i in range(10_000)])
    assert flags.mean() == pytest.approx(ratio, abs=0.01)
    old_tokens = {tuple(e.tokens) for e in old}
    assert all((tuple(records[i]["tokens"]) in old_tokens) == bool(flags[i]) for i in range(500))
    counts = [segment_counts(b) for b in take(iter(pipeline), 100)]
    observed = sum(c["replayed"] for c in counts) / sum(c["examples"] for c in counts)
    assert observed == pytest.approx(ratio, abs=0.03)
    assert pipeline.summary()["replay_ratio"] == ratio
    assert SFTPipeline(new, pipeline.config).summary()["replay_ratio"] == 0.0  # empty buffer


@pytest.mark.parametrize("field, value, message", [
    ("seq_len", 0, "seq_len=0"), ("replay_ratio", 1.0, "replay_ratio=1.0"),
    ("task_weights", {"chitchat": 1.0}, "task_weights.chitchat=1.0: unknown task type"),
    ("task_weights", {"tool_selection": -1.0}, "tool_selection=-1.0"),
    ("packing_bins", -1, "packing_bins=-1"),
])
def test_bad_settings_fail_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig(**{"seq_len": 64, "batch_size": 4, field: value})


def test_an_example_longer_than_a_row_is_an_error():
    with pytest.raises(ValueError, match="'e0' has .* tokens > seq_len 8"):
        SFTPipeline(EXAMPLES, PipelineConfig(seq_len=8, batch_size=4))
