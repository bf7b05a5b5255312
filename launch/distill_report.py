"""Analytics & QA of a distillation output: report.md, stats.json and PNGs.

    python launch/distill_report.py --state_dir=runs/distill/terminal
    python launch/distill_report.py --state_dir=... --out=reports/terminal --spot_checks=10

Coverage by family and difficulty, acceptance rate and drop reasons, score distribution,
teacher/reviewer usage shares, token lengths, language mix and a random spot-check sample
(`seetjax/distill/analytics.py`; what to check by hand: docs/qa_checklist.md).
"""

from absl import app, flags

_STATE = flags.DEFINE_string("state_dir", None, "The run's state directory (its journal; the "
                             "output directory unless output.state_dir was set).", required=True)
_OUT = flags.DEFINE_string("out", "", "Where to write the report ('' = <state_dir>/report).")
_SPOT = flags.DEFINE_integer("spot_checks", 5, "Random accepted traces shown in full.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the spot-check sample.")


def main(argv):
    del argv
    from pathlib import Path

    from seetjax.distill.analytics import write_report

    out = _OUT.value or Path(_STATE.value) / "report"
    print(write_report(_STATE.value, out, _SPOT.value, _SEED.value))


if __name__ == "__main__":
    app.run(main)
