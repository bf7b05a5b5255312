"""The TFDS target: a distillation output built as ArrayRecord and served to grain through
`tfds.data_source`, with no TensorFlow (the `tfds` extra; skipped without it)."""

import sys

import grain
import pytest

from seetjax.distill.pipeline import run
from seetjax.distill.writer import read_records
from tests.distill.distilllib import GENERATED, live_oracle, raw_config, with_urls

tfds = pytest.importorskip("tensorflow_datasets")


def test_distilled_shards_build_and_serve_to_grain_without_tensorflow(tmp_path):
    from seetjax.distill.tfds_builder import NAME, DistilledShards, to_record

    out = tmp_path / "out"
    raw = raw_config(out, [{"family": "telecom", "quota": 5},
                           {"family": "support", "quota": 3, "params": GENERATED}])
    with live_oracle(raw) as (url, _):
        run(with_urls(raw, {"oracle": url}))
    expected = {r.id: r for r in read_records(str(out))}
    assert len(expected) == 8

    data_dir = tmp_path / "tfds"
    DistilledShards(source=str(out), data_dir=str(data_dir)).download_and_prepare()
    # Read by name from the prepared files, as a trainer would: no builder code involved.
    source = tfds.data_source(f"{NAME}/test", data_dir=str(data_dir), split="train")
    assert len(source) == 8
    dataset = grain.MapDataset.source(source).shuffle(seed=0)
    examples = [dataset[i] for i in range(len(dataset))]
    records = [to_record(e) for e in examples]
    assert {r.id: r for r in records} == expected
    for example, record in zip(examples, records, strict=True):
        assert example["id"].decode() == record.id
        assert example["family"].decode() == record.metadata.scenario_type
        assert example["score"] == pytest.approx(record.metadata.score)
    assert "tensorflow" not in sys.modules
