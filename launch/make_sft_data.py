"""Writes agent SFT dialogs (JSONL) from BFCL multi-turn ground truth, replayed for real results.

    python launch/make_sft_data.py --out=data/bfcl_train.jsonl --split=train \
        --categories=base,miss_func --prompt_style=compact --call_format=hermes

Prints how many dialogs were written per task type, and every task left out with the reason.
"""

from absl import app, flags

from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.dialogs import type_counts, write_jsonl
from seetjax.envs.bfcl import SPLITS
from seetjax.envs.bfcl_data import CATEGORIES

_OUT = flags.DEFINE_string("out", None, "JSONL file to write.", required=True)
_SPLIT = flags.DEFINE_enum("split", "train", SPLITS, "BFCL scenario split.")
_CATEGORIES = flags.DEFINE_list("categories", list(CATEGORIES), "BFCL multi-turn categories.")
_STYLE = flags.DEFINE_enum("prompt_style", "native", ["bfcl", "native", "compact"],
                           "How tool docs are shown (seetjax.envs.bfcl.BfclEnvConfig).")
_FORMAT = flags.DEFINE_string("call_format", None, "python or hermes (default: the style's own).")
_PARALLEL = flags.DEFINE_bool("parallel_calls", False,
                              "All of a turn's calls in one assistant message.")


def main(argv):
    del argv
    dialogs, report = bfcl_dialogs(_SPLIT.value, _CATEGORIES.value, prompt_style=_STYLE.value,
                                   call_format=_FORMAT.value, parallel_calls=_PARALLEL.value)
    count = write_jsonl(dialogs, _OUT.value)
    print(f"wrote {count} dialogs to {_OUT.value}; task types {type_counts(dialogs)}")
    print(report)


if __name__ == "__main__":
    app.run(main)
