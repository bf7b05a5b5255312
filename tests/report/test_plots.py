import json

from seetjax.report.plots import plot_curves, present_panels, read_metrics


def _rows():
    rows = [{"step": 0, "eval/train_format_validity": 0.4, "eval/untrained_format_validity": 0.0,
             "eval/untrained_bfcl_test_overall": 0.0, "eval/bfcl_test_overall": 0.1}]
    for step in range(1, 5):
        rows.append({"step": step, "stage": 1 + step // 3, "rollout/reward": 0.1 * step,
                     "rollout/format_validity": 0.5, "learner/loss": None})
    return rows


def test_present_panels_keeps_only_series_with_values():
    panels = dict(present_panels(_rows()))
    assert panels["format validity"] == ["rollout/format_validity", "eval/train_format_validity",
                                         "eval/untrained_format_validity"]
    assert panels["BFCL overall (greedy eval)"] == ["eval/bfcl_test_overall",
                                                    "eval/untrained_bfcl_test_overall"]
    assert panels["reward"] == ["rollout/reward"]
    assert "loss" not in panels  # only None values
    assert "anchors used, by source" not in panels


def test_plot_curves_writes_png_from_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()) + "\n")
    out = plot_curves(read_metrics(path), tmp_path / "curves.png", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
