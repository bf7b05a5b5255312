"""The shards of a distillation run load with Hugging Face `datasets` (offline, local files), and
the JSONL and Parquet shards hold the same rows."""

import json

import datasets

from seetjax.distill.pipeline import run
from seetjax.distill.records import ARROW_SCHEMA
from seetjax.distill.writer import MANIFEST, read_records
from tests.distill.distilllib import GENERATED, live_oracle, raw_config, with_urls


def test_jsonl_and_parquet_shards_load_with_datasets_as_identical_rows(tmp_path, monkeypatch):
    # Local files only: `datasets` read HF_DATASETS_OFFLINE when imported, so set what it read.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    out = tmp_path / "out"
    raw = raw_config(out, [{"family": "telecom", "quota": 6},
                           {"family": "terminal", "quota": 4, "params": GENERATED}])
    raw["output"]["shard_size"] = 4  # several shards, the last one partial
    with live_oracle(raw) as (url, _):
        run(with_urls(raw, {"oracle": url}))
    shards = json.loads((out / MANIFEST).read_text())["shards"]
    assert len(shards) == 3

    def load(fmt: str, **kwargs):
        files = [str(out / s["files"][fmt]) for s in shards]
        return datasets.load_dataset("json" if fmt == "jsonl" else fmt, data_files=files,
                                     split="train", cache_dir=str(tmp_path / "cache"), **kwargs)

    expected = [r.row() for r in read_records(str(out))]
    assert len(expected) == 10
    parquet = load("parquet")
    assert load("jsonl").to_list() == parquet.to_list() == expected
    # JSON inference types an all-null column as null; given the writer's schema, the JSONL
    # shards load as the very table the Parquet shards hold.
    typed = load("jsonl", features=datasets.Features.from_arrow_schema(ARROW_SCHEMA))
    assert typed.features == parquet.features
    assert typed.data.table.equals(parquet.data.table)
