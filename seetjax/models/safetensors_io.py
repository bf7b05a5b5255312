"""Reading and writing safetensors files with numpy only (no torch), bf16 included.

Reading memory-maps each file, so a tensor is only read when asked for, and a sharded placement can
read just the slices a process holds.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import safetensors.numpy

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def _read_header(path: Path) -> tuple[dict, int]:
    """The tensor entries of a safetensors file and where its data starts; a ValueError naming the
    file when it is not one, or is shorter than its header says (a copy cut off)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size < 8:
            raise ValueError(f"{path}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", f.read(8))
        if 8 + n > size:
            raise ValueError(f"{path}: truncated: its header needs {8 + n} bytes, the file has "
                             f"{size} ({8 + n - size} bytes short)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
    header.pop("__metadata__", None)
    needed = 8 + n + max((e["data_offsets"][1] for e in header.values()), default=0)
    if needed > size:
        raise ValueError(f"{path}: truncated: its tensors need {needed} bytes, the file has {size} "
                         f"({needed - size} bytes short)")
    return header, 8 + n


class SafetensorsReader(Mapping):
    """Read-only mapping tensor name -> numpy array over one file or a sharded checkpoint dir."""

    def __init__(self, path: str | os.PathLike, single_file: str = SINGLE_FILE,
                 index_file: str = INDEX_FILE):
        path = Path(path)
        if path.is_file():
            files = [path]
        elif (path / index_file).exists():
            weight_map = json.loads((path / index_file).read_text())["weight_map"]
            files = sorted({path / f for f in weight_map.values()})
        elif (path / single_file).exists():
            files = [path / single_file]
        else:
            raise FileNotFoundError(f"no {single_file} or {index_file} in {path}")
        self._entries: dict[str, tuple[Path, dict, int]] = {}
        for file in files:
            header, data_start = _read_header(file)
            for name, entry in header.items():
                self._entries[name] = (file, entry, data_start)
        self._maps: dict[Path, np.memmap] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        file, entry, data_start = self._entries[name]
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"{file}: tensor {name} has unsupported dtype {entry['dtype']}")
        if file not in self._maps:
            self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        begin, end = entry["data_offsets"]
        raw = self._maps[file][data_start + begin:data_start + end]
        return raw.view(_DTYPES[entry["dtype"]]).reshape(entry["shape"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def write_sharded(tensors: Mapping[str, np.ndarray], out_dir: str | os.PathLike,
                  max_shard_bytes: int = 4 << 30) -> list[Path]:
    """Writes `tensors` as model.safetensors, or as numbered shards plus an index when larger
    than `max_shard_bytes` (the Hugging Face layout)."""
    out_dir = Path(out_dir)
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, arr in tensors.items():
        if shards[-1] and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    metadata = {"format": "pt"}  # transformers reads the layout as PyTorch's (row-major, [out, in])
    if len(shards) == 1:
        files = [out_dir / SINGLE_FILE]
        safetensors.numpy.save_file(shards[0], files[0], metadata=metadata)
        return files
    files = [out_dir / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
             for i in range(len(shards))]
    weight_map = {}
    for file, shard in zip(files, shards):
        safetensors.numpy.save_file(shard, file, metadata=metadata)
        weight_map.update({name: file.name for name in shard})
    index = {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
             "weight_map": weight_map}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2))
    return files
