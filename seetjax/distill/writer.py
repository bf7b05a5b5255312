"""The dataset writer: deduplicated, sharded JSONL and Parquet, resumable exactly once.

Every scenario's outcome (accepted, rejected with its reason, or duplicate) is first appended to
the journal (`<state_dir>/journal.jsonl`, flushed and fsynced line by line): an outcome is
committed once its line is whole. Accepted records are then cut into shards of
`output.shard_size` in journal order: each shard file is written to a temporary name, fsynced
and renamed into place, and only then is `manifest.json` (also written atomically) updated to
list it. So at any kill (-9 included):

- a torn last journal line is dropped on restart (that outcome was never committed and is redone);
- a shard file the manifest does not list is deleted (its records are still in the journal and go
  into the same shard again);
- records in the journal but in no listed shard are the next shard's first records.

Nothing committed is lost and nothing is written twice. A rerun skips every scenario in the
journal whose outcome is final and, with raised quotas, adds the new ones after; a scenario
rejected for a reason in `retry_failed` (the endpoints' failures by default) is played again,
its new outcome appended to the journal, where a scenario's last outcome is the one that counts
(`read_outcomes`). A run's last, partial shard stays as it is, and later records start a new
shard. Deduplication is checked at commit time against every record accepted before, in commit
order, so it is deterministic for a given order. `output.url` may be an fsspec URL (object
storage); the journal stays local in `state_dir`.

The manifest also records the rules the outcomes were judged by (`DistillConfig.rules`), each
set with the number of journal lines committed before it (`since`): a rerun under other rules is
refused, naming the differences, unless allowed (`--allow_rule_change`), which appends the new
set. `usage.json` in `state_dir` holds the requests and tokens of every invocation so far (saved
at each commit), which budgets and the report count from.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from seetjax.distill.config import DistillConfig, Output
from seetjax.distill.dedup import Deduplicator
from seetjax.distill.records import ARROW_SCHEMA, Outcome, Record

MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
REJECTED = "rejected.jsonl"
USAGE = "usage.json"
# pool -> endpoint -> requests / failures / retries / prompt_tokens / completion_tokens
UsageCounts = dict[str, dict[str, dict[str, int]]]


class OutputRefused(RuntimeError):
    """This run may not write the output: another run holds it, or wrote it differently."""


class RuleChange(OutputRefused):
    """A rerun whose rules differ from those the output's outcomes were judged by."""


def shard_name(index: int, fmt: str) -> str:
    return f"shard-{index:05d}.{fmt}"


def jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), buffer)
    return buffer.getvalue()


class Storage:
    """Files under an output URL: atomic whole-file writes (fsynced, renamed) on a local path;
    single puts through fsspec elsewhere (an object store's put is atomic per object)."""

    def __init__(self, url: str, fsync: bool = True):
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple)
                                else (self.fs.protocol,))
        self.fsync = fsync
        self.fs.makedirs(self.root, exist_ok=True)

    def path(self, name: str) -> str:
        return posixpath.join(self.root, name)

    def write(self, name: str, data: bytes) -> None:
        final = self.path(name)
        if not self.local:
            with self.fs.open(final, "wb") as f:
                f.write(data)
            return
        tmp = f"{final}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
        if self.fsync:  # the rename itself must survive a crash too
            directory = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def read(self, name: str) -> bytes | None:
        path = self.path(name)
        if not self.fs.exists(path):
            return None
        with self.fs.open(path, "rb") as f:
            return f.read()

    def names(self) -> list[str]:
        return sorted(posixpath.basename(p) for p in self.fs.ls(self.root, detail=False))

    def delete(self, name: str) -> None:
        self.fs.rm(self.path(name))


def state_path(output: Output) -> Path:
    """Where the journal and run summary live: `state_dir`, else the (local) output itself."""
    return Path(output.state_dir or fsspec.core.url_to_fs(output.url)[1])


class Journal:
    """The append-only outcome log (see the module docstring); holds an exclusive lock so that
    two runs never write one output."""

    def __init__(self, state_dir: Path, fsync: bool = True):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path, self.fsync = state_dir / JOURNAL, fsync
        self.file = open(self.path, "a+b")  # noqa: SIM115 - held for the writer's life
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputRefused(f"{self.path} is locked: another run writes this output") from None

    def recover(self) -> list[Outcome]:
        """Every committed outcome; a torn last line is cut off the file."""
        self.file.seek(0)
        data = self.file.read()
        end = data.rfind(b"\n") + 1
        outcomes = [Outcome.model_validate_json(line) for line in data[:end].splitlines()
                    if line.strip()]
        if end < len(data):
            self.file.truncate(end)
        self.file.seek(0, os.SEEK_END)
        return outcomes

    def append(self, outcome: Outcome) -> None:
        self.file.write(outcome.model_dump_json().encode("utf-8") + b"\n")
        self.file.flush()
        if self.fsync:
            os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


class ShardWriter:
    """Commits outcomes and writes shards (see the module docstring); resumes on construction.
    `done`: the scenarios whose outcome is final; `latest`: every scenario's last outcome."""

    def __init__(self, config: DistillConfig, allow_rule_change: bool = False):
        output = config.output
        self.config, self.formats, self.size = config, output.formats, output.shard_size
        self.storage = Storage(output.url, output.fsync)
        self.journal = Journal(state_path(output), output.fsync)
        try:
            self._resume(allow_rule_change)
        except BaseException:
            self.journal.close()  # and its lock: a refused run may be started again at once
            raise

    def _resume(self, allow_rule_change: bool) -> None:
        config, output = self.config, self.config.output
        self.dedup = Deduplicator(config.dedup)
        self.outcomes = self.journal.recover()
        manifest = self.storage.read(MANIFEST)
        self.manifest = json.loads(manifest) if manifest else {
            "run_name": config.run_name, "fingerprint": config.fingerprint(), "shards": []}
        if self.manifest["fingerprint"] != config.fingerprint():
            raise OutputRefused(
                f"{output.url} holds run {self.manifest['run_name']!r} written with a different "
                "run_name, seed, dedup or output format settings; use another output.url")
        self._check_rules(allow_rule_change)
        listed = {name for shard in self.manifest["shards"] for name in shard["files"].values()}
        for name in self.storage.names():
            if name.startswith("shard-") and name not in listed:
                self.storage.delete(name)  # written, never listed: rewritten from the journal
        sharded = {i for shard in self.manifest["shards"] for i in shard["ids"]}
        self.pending: list[Record] = []
        for outcome in self.outcomes:
            if outcome.status == "accepted":
                self.dedup.add(outcome.record)
                if outcome.record.id not in sharded:
                    self.pending.append(outcome.record)
        self.latest = latest_outcomes(self.outcomes)
        self.done = {i for i, o in self.latest.items() if self.final(o)}

    def final(self, outcome: Outcome) -> bool:
        """Whether a rerun leaves this outcome as it is (see `DistillConfig.retry_failed`)."""
        return outcome.status != "rejected" or outcome.reason not in self.config.retry_failed

    def _check_rules(self, allow_change: bool) -> None:
        """Records the config's rules in the manifest, or refuses other rules than those the
        outcomes were judged by unless `allow_change` (see the module docstring)."""
        rules = self.config.rules()
        history = self.manifest.setdefault("rules", [])
        if history and history[-1]["rules"] == rules:
            return
        if history and self.outcomes and not allow_change:
            changes = "; ".join(_differences(history[-1]["rules"], rules))
            raise RuleChange(
                f"{self.config.output.url}: its {len(self.outcomes)} outcomes were judged by "
                f"other rules ({changes}); rerun with the same rules, use another output.url, or "
                "pass --allow_rule_change to record the new rules from here on")
        if history and history[-1]["since"] == len(self.outcomes):
            history.pop()  # those rules judged nothing
        history.append({"since": len(self.outcomes), "rules": rules})
        self.storage.write(MANIFEST, json.dumps(self.manifest, indent=1).encode())

    def commit(self, outcome: Outcome) -> Outcome:
        """Deduplicates an accepted record, journals the outcome, writes any full shard; returns
        the outcome as committed (a duplicate's status says so)."""
        if outcome.scenario_id in self.done:
            raise ValueError(f"scenario {outcome.scenario_id} is committed already")
        if outcome.status == "accepted":
            duplicate = self.dedup.check(outcome.record)
            if duplicate is not None:
                kind, of = duplicate
                outcome = Outcome(scenario_id=outcome.scenario_id, status="duplicate",
                                  reason=f"duplicate_{kind}", duplicate_of=of)
        self.journal.append(outcome)
        self.outcomes.append(outcome)
        self.latest[outcome.scenario_id] = outcome
        if self.final(outcome):
            self.done.add(outcome.scenario_id)
        if outcome.status == "accepted":
            self.dedup.add(outcome.record)
            self.pending.append(outcome.record)
            if len(self.pending) >= self.size:
                self._flush()
        return outcome

    def _flush(self) -> None:
        records, self.pending = self.pending[:self.size], self.pending[self.size:]
        if not records:
            return
        index = len(self.manifest["shards"])
        rows = [r.row() for r in records]
        files = {}
        for fmt in self.formats:
            name = shard_name(index, fmt)
            self.storage.write(name, jsonl_bytes(rows) if fmt == "jsonl" else parquet_bytes(rows))
            files[fmt] = name
        self.manifest["shards"].append({"index": index, "records": len(records), "files": files,
                                        "ids": [r.id for r in records]})
        self.storage.write(MANIFEST, json.dumps(self.manifest, indent=1).encode())

    def finish(self) -> None:
        """Writes the last, partial shard and the rejected traces (for QA)."""
        while self.pending:
            self._flush()
        rejected = [o.model_dump(mode="json") for o in self.latest.values()
                    if o.status != "accepted"]
        self.storage.write(REJECTED, jsonl_bytes(rejected))

    def close(self) -> None:
        self.journal.close()


def read_records(url: str, fmt: str = "jsonl") -> Iterator[Record]:
    """The records of a finished output, shard by shard, in the manifest's order."""
    storage = Storage(url, fsync=False)
    manifest = storage.read(MANIFEST)
    if manifest is None:
        raise FileNotFoundError(f"{url}: no {MANIFEST} (not a distillation output)")
    for shard in json.loads(manifest)["shards"]:
        data = storage.read(shard["files"][fmt])
        if fmt == "jsonl":
            rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line]
        else:
            rows = pq.read_table(io.BytesIO(data)).to_pylist()
        yield from (Record.model_validate(row) for row in rows)


def latest_outcomes(outcomes: list[Outcome]) -> dict[str, Outcome]:
    """Each scenario's last outcome (a retried scenario's earlier ones are superseded), in the
    order scenarios were first committed."""
    latest: dict[str, Outcome] = {}
    for outcome in outcomes:
        latest[outcome.scenario_id] = outcome
    return latest


def read_outcomes(state_dir: str | os.PathLike) -> list[Outcome]:
    """Every scenario's committed outcome (the last one in its journal), read-only."""
    path = Path(state_dir) / JOURNAL
    data = path.read_bytes() if path.exists() else b""
    return list(latest_outcomes([Outcome.model_validate_json(line) for line in
                                 data[:data.rfind(b"\n") + 1].splitlines() if line.strip()]
                                ).values())


def read_usage(state_dir: str | os.PathLike) -> UsageCounts:
    """The requests and tokens of every invocation of a run so far ({} before its first)."""
    path = Path(state_dir) / USAGE
    return json.loads(path.read_text()) if path.exists() else {}


def write_usage(state_dir: str | os.PathLike, usage: UsageCounts) -> None:
    """Replaces `usage.json` whole (renamed into place; not fsynced: it is written at every
    commit, and a crash loses at most the count of the requests since the last one)."""
    path = Path(state_dir) / USAGE
    tmp = path.with_name(f"{USAGE}.tmp")
    tmp.write_text(json.dumps(usage, indent=1))
    os.replace(tmp, path)


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """`field: old -> new` for every leaf that differs between two JSON values."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted({*old, *new}) for d in _differences(
            old.get(key), new.get(key), f"{path}.{key}" if path else key)]
    return [] if old == new else [f"{path}: {json.dumps(old)} -> {json.dumps(new)}"]
