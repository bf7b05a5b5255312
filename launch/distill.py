"""Agentic distillation: scenarios -> teacher pool -> validated, reviewed traces -> shards.

    python launch/distill.py --config=configs/distill/run.terminal.yaml
    python launch/distill.py --config=... --set concurrency.max_workers=32 --set scenarios.0.quota=500
    python launch/distill.py --config=... --sft_out=data/distilled.jsonl --report
    python launch/distill.py --config=... --serve=oracle --port=8100   # the offline oracle teacher

The config (YAML, `seetjax/distill/config.py`) is validated before any request, naming the field
at fault; every endpoint is then checked (`GET /models`) unless `preflight: false`, before
anything is written. A rerun with the same config resumes: finished scenarios are skipped,
those the teacher failed are tried again (`retry_failed`), raised quotas extend the output, and
budgets count what earlier runs spent; a rerun under other rules (review, language policy,
validation) is refused unless `--allow_rule_change`.
`--serve=oracle` serves the oracle endpoint (answers the config's scenarios from their ground
truth) on 127.0.0.1 instead of distilling; `--serve=fault` the same behind injected faults.
"""

import asyncio
import logging as logging_lib
import math
import sys

from absl import app, flags, logging

_CONFIG = flags.DEFINE_string("config", None, "The run's YAML config.", required=True)
_SET = flags.DEFINE_multi_string("set", [], "field.path=value overrides (YAML values).")
_SFT_OUT = flags.DEFINE_string("sft_out", "", "Also write the accepted records as SFT dialogs "
                               "(JSONL for seetjax/sft/run.py, data.source=jsonl) to this path.")
_MIN_SCORE = flags.DEFINE_float("sft_min_score", 0.0, "Records scoring less are left out of "
                                "--sft_out (0..1).")
_REPORT = flags.DEFINE_bool("report", False, "Write report.md and PNGs to <state_dir>/report.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Validate the config, list the plan, stop.")
_ALLOW_RULE_CHANGE = flags.DEFINE_bool(
    "allow_rule_change", False, "Continue an output under other rules (review, language policy, "
    "validation, episode, prompt) than its outcomes were judged by; the manifest records both.")
_SERVE = flags.DEFINE_enum("serve", "", ["", "oracle", "fault"],
                           "Serve a local endpoint for the config's scenarios instead.")
_PORT = flags.DEFINE_integer("port", 8100, "Port of --serve (127.0.0.1).", lower_bound=1,
                             upper_bound=65535)
_LATENCY = flags.DEFINE_float("latency_s", 0.0, "--serve=oracle: seconds before each answer "
                              "(a model's think time, for benchmarks).")
_FAULTS = flags.DEFINE_list("faults", ["429", "500", "timeout", "malformed", "truncated", "ok",
                                       "ok", "ok"],
                            "--serve=fault: the faults answered in turn ('ok': none).")
# A bound alone lets nan through (every comparison with nan is false).
flags.register_validator("sft_min_score", lambda v: math.isfinite(v) and 0.0 <= v <= 1.0,
                         "--sft_min_score must be a number in 0..1")


def serve(config) -> None:
    import uvicorn

    from seetjax.distill.scenarios import scenario_stream
    from seetjax.distill.servers import Oracle, fault_app, oracle_app

    oracle = Oracle(scenario_stream(config.scenarios),
                    summary_marker=config.language_policy.summary_marker)
    if _SERVE.value == "oracle":
        server = oracle_app(oracle, _LATENCY.value)
    else:
        server = fault_app(oracle, [None if f == "ok" else f for f in _FAULTS.value])
    logging.info("serving the %s endpoint on http://127.0.0.1:%d/v1 (model 'oracle')",
                 _SERVE.value, _PORT.value)
    uvicorn.run(server, host="127.0.0.1", port=_PORT.value, log_level="warning")


def main(argv):
    del argv
    from seetjax.distill.config import ConfigError
    from seetjax.distill.endpoints import PreflightError
    from seetjax.distill.load import load_config
    from seetjax.distill.pipeline import run_async
    from seetjax.distill.scenarios import scenario_ids
    from seetjax.distill.writer import OutputRefused

    logging_lib.getLogger("httpx").setLevel(logging_lib.WARNING)  # one line per request
    try:
        config = load_config(_CONFIG.value, _SET.value)
    except ConfigError as e:
        sys.exit(f"distill: {e}")
    if _SERVE.value:
        return serve(config)
    if _DRY_RUN.value:
        ids = scenario_ids(config.scenarios)
        print(f"{config.run_name}: {len(ids)} scenarios "
              f"({', '.join(s.key() + f' x{s.quota}' for s in config.scenarios)}); teachers "
              f"{[e.name for e in config.teacher_pool]}, reviewers "
              f"{[e.name for e in config.reviewer_pool]}; output {config.output.url}")
        return
    try:
        summary = asyncio.run(run_async(config, allow_rule_change=_ALLOW_RULE_CHANGE.value))
    except (PreflightError, OutputRefused) as e:
        sys.exit(f"distill: {e}")
    logging.info("%s: committed %s, reasons %s, skipped %d, retried %d, undone %d, %.1f s "
                 "(%.2f records/s)", config.run_name, summary.committed, summary.reasons,
                 summary.skipped, summary.retried, summary.undone, summary.seconds,
                 summary.records_per_s)
    print(f"committed {summary.committed}; reasons {summary.reasons}; skipped {summary.skipped}; "
          f"retried {summary.retried}; undone {summary.undone}; "
          f"{summary.records_per_s:.2f} records/s")
    if _SFT_OUT.value:
        from seetjax.distill.to_sft import convert_output
        count = convert_output(config.output.url, _SFT_OUT.value, _MIN_SCORE.value)
        print(f"{count} SFT dialogs in {_SFT_OUT.value}")
    if _REPORT.value:
        from seetjax.distill.analytics import write_report
        from seetjax.distill.writer import state_path
        state = state_path(config.output)
        print(f"report: {write_report(state, state / 'report')}")


if __name__ == "__main__":
    app.run(main)
