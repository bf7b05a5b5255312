"""A TFDS dataset of a distillation output, written as ArrayRecord and read back through
`tfds.data_source` (random access, for grain) without TensorFlow.

    builder = DistilledShards(source="runs/distill/telecom", data_dir="runs/tfds")
    builder.download_and_prepare()
    source = tfds.data_source("distilled_shards/telecom", data_dir="runs/tfds", split="train")
    dataset = grain.MapDataset.source(source).shuffle(seed=0)
    record = to_record(dataset[0])

One builder config per distillation run (its `run_name`), so several runs share a data_dir. An
example keeps the record whole as its JSON row (`record`: the same row the JSONL shards hold,
read back with `to_record`) beside flat fields to filter on without parsing it. Needs the
`tfds` extra (`tensorflow-datasets`); TensorFlow itself is never imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from seetjax.distill.records import Record
from seetjax.distill.writer import MANIFEST, Storage, read_records

NAME = "distilled_shards"


class DistilledShards(tfds.core.GeneratorBasedBuilder):
    """The accepted records of one distillation output, as the split `train`."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Records as JSON rows, with id, family, difficulty and score."}

    def __init__(self, *, source: str, **kwargs: Any):
        """`source`: the output URL of a finished run (its manifest names the run and shards)."""
        manifest = Storage(source, fsync=False).read(MANIFEST)
        if manifest is None:
            raise FileNotFoundError(f"{source}: no {MANIFEST} (not a distillation output)")
        manifest = json.loads(manifest)
        run_name = manifest["run_name"]
        written = {fmt for shard in manifest["shards"] for fmt in shard["files"]}
        # Both formats hold identical rows; Parquet is the cheaper read.
        self.source, self.fmt = source, "parquet" if "parquet" in written else "jsonl"
        kwargs.setdefault("file_format", "array_record")
        super().__init__(config=tfds.core.BuilderConfig(name=run_name), **kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=__doc__.split("\n\n")[0],
            features=tfds.features.FeaturesDict({
                "id": tfds.features.Text(),
                "family": tfds.features.Text(),
                "difficulty": tfds.features.Text(),
                "score": np.float32,
                "record": tfds.features.Text(),
            }))

    def _split_generators(self, dl_manager: tfds.download.DownloadManager
                          ) -> dict[str, Iterator[tuple[str, dict[str, Any]]]]:
        del dl_manager  # the shards are local (or fsspec) files, nothing is downloaded
        return {"train": self._generate_examples()}

    def _generate_examples(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for record in read_records(self.source, self.fmt):
            metadata = record.metadata
            yield record.id, {"id": record.id, "family": metadata.scenario_type,
                              "difficulty": metadata.difficulty, "score": metadata.score,
                              "record": json.dumps(record.row(), ensure_ascii=False)}


def to_record(example: Mapping[str, Any]) -> Record:
    """The record of an example read from the data source (its text fields come as bytes)."""
    return Record.model_validate_json(example["record"])
