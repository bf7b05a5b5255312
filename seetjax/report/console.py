"""A run's lines on the console: process 0 speaks for every process, above any progress bar."""

from __future__ import annotations

import sys

import jax
from tqdm import tqdm


def say(message: str) -> None:
    """Prints `message` on process 0, above a running tqdm bar (none running: a plain line)."""
    if jax.process_index() == 0:
        tqdm.write(message)
        sys.stdout.flush()
