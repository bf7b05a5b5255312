"""Where a traced program's device time goes: the ops of a `jax.profiler.trace`, summed by name.

On a GPU the device plane's "XLA Ops" line (or its streams' kernels, where the plane has no
such line); on the CPU the host's XLA threads (several at once: their busy time can pass the
span). `busy_s` (device time of every op) against the traced span says how much of the wall
the device spent waiting between ops: a decode step whose kernels are short and launched one
by one shows it there, not in its op times.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def traced() -> Iterator[dict[str, Any]]:
    """Traces the block; the summary (`summarise`) fills the yielded dict when it ends."""
    import jax

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory):
            yield result
        (path,) = glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True)
        result.update(summarise(path))


def summarise(path: str, top: int = 25) -> dict[str, Any]:
    """The ops of the trace at `path`: lines read, busy seconds, the span from the first op's
    start to the last one's end, and the `top` op names by total time (seconds, count,
    share of busy)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(path)
    lines = _op_lines(data)
    seconds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    starts, ends = [], []
    for _, line in lines:
        # The CPU's thunk executor wraps the ops it runs: its events would count them twice.
        for event in (e for e in line.events if not e.name.startswith(("ThunkExecutor", "end: "))):
            seconds[event.name] += event.duration_ns / 1e9
            counts[event.name] += 1
            starts.append(event.start_ns)
            ends.append(event.end_ns)
    busy = sum(seconds.values())
    return {"lines": sorted({f"{plane}: {line.name}" for plane, line in lines}),
            "busy_s": busy, "span_s": (max(ends) - min(starts)) / 1e9 if starts else 0.0,
            "ops": len(seconds),
            "top": [{"name": name, "s": s, "count": counts[name], "share": s / busy}
                    for name, s in seconds.most_common(top)]}


def _op_lines(data) -> list[tuple[str, Any]]:
    """(plane name, line) of the lines holding the ops."""
    devices = [(p.name, line) for p in data.planes if p.name.startswith("/device:")
               for line in p.lines]
    if devices:
        ops = [(p, line) for p, line in devices if line.name == "XLA Ops"]
        return ops or [(p, line) for p, line in devices if "Stream" in line.name]
    return [(p.name, line) for p in data.planes if p.name == "/host:CPU" for line in p.lines
            if line.name.startswith("tf_XLA")]


def profile(run: Callable[[], Any]) -> dict[str, Any]:
    """`run()` traced (it must wait for its device work), summarised."""
    with traced() as result:
        run()
    return result


def profile_text(p: dict) -> str:
    """E.g. 'device busy 62% of the traced decode's 0.41 s, 391 ops; top: fusion.12 9%, ...'."""
    top = ", ".join(f"{o['name'][:40]} {o['share']:.0%}" for o in p["top"][:6])
    return (f"device busy {p['busy_s'] / max(p['span_s'], 1e-12):.0%} of the traced decode's "
            f"{p['span_s']:.2f} s, {p['ops']} ops; top: {top}")
