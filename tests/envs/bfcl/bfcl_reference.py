"""bfcl_eval's own multi-turn checker, run side by side with ours (parity tests, benchmark).

bfcl_eval's executor passes call strings to `eval` and caches instances in its module globals
under names built from the model name and entry id. Each run here gets a fresh model name and its
cached instances are dropped afterwards. Only call strings we render ourselves from parsed,
literal-only calls (`ToolCall.to_python`) or BFCL's ground truth are given to it, never model text.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import re
from collections.abc import Sequence
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from seetjax.tools.calls import ToolCall

_RUN_IDS = itertools.count()
_SAFE_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\(")


def bfcl_check(entry: dict[str, Any], trajectory: Sequence[Sequence[Sequence[ToolCall]]]) -> dict:
    """bfcl_eval's verdict on a trajectory of parsed calls (rendered as BFCL's decoded strings)."""
    decoded = [[[_render(call) for call in step] for step in turn if step] for turn in trajectory]
    return bfcl_check_strings(entry, decoded)


def bfcl_check_strings(entry: dict[str, Any], decoded: list[list[list[str]]]) -> dict:
    """bfcl_eval's `multi_turn_checker` on decoded call strings, with the force-termination rule
    its eval runner applies first; its cached instances are removed afterwards."""
    if len(decoded) != len(entry["ground_truth"]):
        return {"valid": False, "error_type": "multi_turn:force_terminated"}
    model_name = f"seetjax_parity_{next(_RUN_IDS)}"
    try:
        return multi_turn_checker(decoded, entry["ground_truth"], entry,
                                  entry["id"].rsplit("_", 1)[0], model_name)
    finally:
        cache = vars(multi_turn_utils)
        for name in [n for n in cache if n.startswith(model_name)]:
            del cache[name]


def _render(call: ToolCall) -> str:
    text = call.to_python()
    # The rendered name is what `eval` will look up: refuse anything but a plain identifier that
    # is neither a keyword nor a Python builtin.
    if not _SAFE_CALL.match(text) or keyword.iskeyword(call.name) or hasattr(builtins, call.name):
        raise ValueError(f"refusing to give {call.name!r} to bfcl_eval's eval-based executor")
    return text
