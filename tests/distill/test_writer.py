"""The dataset writer: whole-output deduplication, and recovery from every crash point without
losing or repeating a committed record."""

import pytest

from seetjax.distill.load import parse_config
from seetjax.distill.pipeline import run
from seetjax.distill.records import Outcome
from seetjax.distill.writer import JOURNAL, ShardWriter, read_outcomes, read_records
from tests.distill.distilllib import GENERATED, live_oracle, raw_config, with_urls


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """20 distinct records distilled by the oracle (5 per family)."""
    out = tmp_path_factory.mktemp("records")
    raw = raw_config(out, [{"family": f, "quota": 5, "params": GENERATED}
                           for f in ("terminal", "support", "travel")]
                     + [{"family": "telecom", "quota": 5}])
    with live_oracle(raw) as (url, _):
        run(with_urls(raw, {"oracle": url}))
    return list(read_records(str(out)))


def _writer_config(out, **output):
    raw = raw_config(out)
    raw["output"].update(shard_size=4, **output)
    return parse_config(raw)


def _accepted(record, scenario_id=None):
    return Outcome(scenario_id=scenario_id or record.id, status="accepted", record=record)


def _near_copy(record, new_id):
    turns = [t.model_copy() for t in record.turns]
    last = max(i for i, t in enumerate(turns) if t.kind == "final_answer")
    turns[last] = turns[last].model_copy(update={"content": turns[last].content + " Thanks!"})
    return record.model_copy(update={"id": new_id, "turns": turns})


def test_exact_and_near_duplicates_are_removed_across_the_whole_output(tmp_path, records):
    originals = records[:16]
    stream = [_accepted(r) for r in originals]
    injected = {}
    for k, source in enumerate(originals[:4]):  # 10% exact, 10% near, after their sources
        new_id = f"{source.id}/copy"
        copy = (source.model_copy(update={"id": new_id}) if k % 2 == 0
                else _near_copy(source, new_id))
        injected[new_id] = ("duplicate_exact" if k % 2 == 0 else "duplicate_near", source.id)
        stream.insert(8 + 3 * k, _accepted(copy))
    writer = ShardWriter(_writer_config(tmp_path))
    committed = [writer.commit(o) for o in stream]
    writer.finish()
    writer.close()
    flagged = {o.scenario_id: (o.reason, o.duplicate_of) for o in committed
               if o.status == "duplicate"}
    assert flagged == injected  # every injected one, and none of the rest
    written = [r.id for r in read_records(str(tmp_path))]
    assert written == [r.id for r in originals]


def test_every_crash_point_recovers_exactly_once(tmp_path, records):
    config = _writer_config(tmp_path, formats=["jsonl", "parquet"])
    writer = ShardWriter(config)
    for record in records[:6]:  # shard 0 (4 records) written, 2 committed records pending
        writer.commit(_accepted(record))
    with pytest.raises(RuntimeError, match="locked"):
        ShardWriter(config)  # one writer per output
    writer.close()  # killed here: no finish()
    # Killed after a shard's rename but before its manifest, and in the middle of a line.
    (tmp_path / "shard-00001.jsonl").write_text("written, never listed\n")
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"scenario_id": "torn')

    writer = ShardWriter(config)
    assert writer.done == {r.id for r in records[:6]}
    assert [r.id for r in writer.pending] == [r.id for r in records[4:6]]
    assert not (tmp_path / "shard-00001.jsonl").exists()
    assert (tmp_path / JOURNAL).read_bytes().endswith(b"\n")
    with pytest.raises(ValueError, match="committed already"):
        writer.commit(_accepted(records[0]))
    for record in records[6:10]:
        writer.commit(_accepted(record))
    writer.finish()
    writer.close()
    for fmt in ("jsonl", "parquet"):
        assert [r.id for r in read_records(str(tmp_path), fmt)] == [r.id for r in records[:10]]
    assert len(read_outcomes(tmp_path)) == 10

    other = raw_config(tmp_path)
    other["run_name"] = "another"
    with pytest.raises(RuntimeError, match="different run_name"):
        ShardWriter(parse_config(other))


def test_remote_output_writes_through_fsspec(tmp_path, records):
    config = _writer_config("memory://distill-test/out", state_dir=str(tmp_path / "state"),
                            formats=["jsonl", "parquet"])
    writer = ShardWriter(config)
    for record in records[:5]:
        writer.commit(_accepted(record))
    writer.finish()
    writer.close()
    rows = [r.row() for r in read_records("memory://distill-test/out", "parquet")]
    assert rows == [r.row() for r in records[:5]]
