"""Long replies: python-format parsing, official decoding and one `BfclEnv.step`, per reply size.

A reply is one line of `echo(...)` calls (a string argument each, with one "é" in every call for
the non-ASCII rows) filling the size, the message cap being 65,536 characters; the failing variant
ends with a bare name, so the error is located at the very end. Times are the best of
`--repeats`; the environment step parses and runs every call of the reply on a fresh episode.

    .venv/bin/python experiments/benchmarks/bench_parser.py [--repeats 5] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from report import add_row, cpu_machine  # noqa: E402

from seetjax.envs.bfcl.data import load_tasks  # noqa: E402
from seetjax.envs.bfcl.env import BfclEnv  # noqa: E402
from seetjax.envs.bfcl.official import decode_official  # noqa: E402
from seetjax.tools.calls import ParseError, parse_python_calls  # noqa: E402

TITLE = "Long replies: python-format parsing and one environment step (bench_parser.py)"
COLUMNS = ["date", "machine", "reply", "calls", "parse_python_calls, ms",
           "parse, failing at the end, ms", "decode_official, ms", "BfclEnv.step, ms"]
SIZES = (16_384, 65_000)


def reply(size: int, text: str) -> str:
    """One line of calls, just under `size` characters."""
    calls, length = [], 2
    while True:
        call = f"echo(content='{text}{len(calls)}', file_name='f{len(calls)}.txt')"
        if length + len(call) + 2 > size:
            return "[" + ", ".join(calls) + "]"
        calls.append(call)
        length += len(call) + 2


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    task = next(t for t in load_tasks("base") if "GorillaFileSystem" in t.involved_classes)
    env = BfclEnv()

    def step(text: str) -> None:
        env.reset(task)
        env.step(text)

    for size in SIZES:
        for label, text in (("ASCII", "x"), ("non-ASCII", "é")):
            message = reply(size, text)
            failing = message[:-1] + ", echo(content=x)]"
            calls = parse_python_calls(message)
            assert isinstance(calls, list) and isinstance(parse_python_calls(failing), ParseError)
            timed = [(parse_python_calls, message), (parse_python_calls, failing),
                     (decode_official, message), (step, message)]
            row = [f"{len(message) / 1024:.0f} KB, {label}", str(len(calls)),
                   *(f"{best_ms(functools.partial(fn, arg), args.repeats):.1f}"
                     for fn, arg in timed)]
            print(" | ".join(row))
            if not args.no_write:
                add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(), *row])


if __name__ == "__main__":
    main()
