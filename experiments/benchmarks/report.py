"""Recording benchmark results: one markdown table per benchmark in BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
_PREAMBLE = ("# Benchmarks\n\nMeasured figures, newest row last in each table. A ratio compares "
             "runs made side by side in one process on the same machine; absolute times vary "
             "with load.\n")


def cpu_machine() -> str:
    """E.g. '2-core Intel(R) Xeon(R) Processor (x86_64)'."""
    model = platform.processor() or "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {model} ({platform.machine()})"


def add_row(title: str, columns: list[str], row: list[str], path: Path = BENCHMARKS) -> None:
    """Appends `row` to the table under `## title`, creating file, section or table if absent."""
    text = path.read_text() if path.exists() else _PREAMBLE
    heading = f"## {title}\n"
    line = "| " + " | ".join(row) + " |\n"
    if heading not in text:
        header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
        text = text.rstrip("\n") + "\n\n" + heading + "\n" + header + line
    else:
        start = text.index(heading) + len(heading)
        end = text.find("\n## ", start)
        end = len(text) if end == -1 else end + 1
        section = text[start:end].rstrip("\n") + "\n" + line
        text = text[:start] + section + ("\n" + text[end:] if end < len(text) else "")
    path.write_text(text)
