"""Near-duplicate detection is exact at the threshold: LSH proposes candidates with (bands, rows)
chosen so that a pair at the threshold is almost never missed, and each candidate is confirmed by
the exact Jaccard similarity of the two records' word shingles."""

from seetjax.distill.config import Dedup
from seetjax.distill.dedup import Deduplicator
from seetjax.distill.records import (
    Generation,
    LanguageInfo,
    Metadata,
    Record,
    TeacherInfo,
    Turn,
)

# Shingle Jaccard similarities planted around the 0.85 threshold, 8 pairs of each.
PLANTED = (0.80, 0.84, 0.86, 0.90, 0.95)
PAIRS = 8


def _record(record_id: str, text: str) -> Record:
    return Record(
        id=record_id, turns=[Turn(role="user", kind="user", content=text, turn=0)], tools=[],
        metadata=Metadata(
            scenario_id=record_id, scenario_type="planted", difficulty="easy", task_id=record_id,
            score=1.0, validation_score=1.0, reflection_passes=0,
            language_policy=LanguageInfo(require_chinese_summary=False, english_share=1.0,
                                         chinese_summary_present=False),
            validation_feedback=[], prompt_tokens=0, completion_tokens=0,
            generation=Generation(run_name="planted", seed=0, review_rounds=[], teacher=TeacherInfo(
                endpoint="e", provider="p", model="m", sampling="{}"))))


def test_planted_near_duplicates_are_dropped_exactly_above_the_threshold():
    dedup = Deduplicator(Dedup(threshold=0.85, shingle_words=5))
    dropped, kept = [], []
    for similarity in PLANTED:
        for pair in range(PAIRS):
            # 104 distinct words give 100 five-word shingles; the first k + 4 words give the
            # first k of them, a subset: Jaccard exactly k / 100.
            words = [f"w{similarity}x{pair}x{i}" for i in range(104)]
            source = _record(f"{similarity}/{pair}", " ".join(words))
            near = _record(f"{similarity}/{pair}/near",
                           " ".join(words[:round(similarity * 100) + 4]))
            assert dedup.check(source) is None
            dedup.add(source)
            verdict = dedup.check(near)
            (dropped if verdict else kept).append(similarity)
            if verdict:
                assert verdict == ("near", source.id)
            dedup.add(near)
    assert kept == [s for s in PLANTED if s < 0.85 for _ in range(PAIRS)]
    assert dropped == [s for s in PLANTED if s >= 0.85 for _ in range(PAIRS)]


def test_answers_differing_by_a_reference_number_are_near_duplicates():
    """The issue's case: 16-word answers and their copies with a "Reference NNNN." sentence
    added, 12 shared shingles of 14 (Jaccard 0.857)."""
    dedup = Deduplicator(Dedup(threshold=0.85))
    for n in range(7):
        words = [f"word{n}x{i}" for i in range(16)]
        source = _record(f"s/{n}", " ".join(words))
        copy = _record(f"s/{n}/ref", " ".join(words) + f" Reference {1000 + 7 * n}.")
        assert dedup.check(source) is None
        dedup.add(source)
        assert dedup.check(copy) == ("near", source.id), n
