"""Writes agent SFT dialogs (JSONL) from BFCL multi-turn ground truth, replayed for real results,
and optionally from BFCL's single-turn entries (tool_selection and tool_retrieval dialogs, their
training split only; seetjax.data.single_turn_dialogs).

    python launch/make_sft_data.py --out=data/bfcl_train.jsonl --split=train \
        --categories=base,miss_func --prompt_style=compact --call_format=hermes \
        --single_turn_selection=500 --single_turn_retrieval=500 --retrieval_k=5

--categories= (empty) writes the single-turn dialogs alone. Prints how many dialogs were written
per task type, and every task left out with the reason.
"""

from absl import app, flags

from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.dialogs import type_counts, write_jsonl
from seetjax.data.single_turn_dialogs import SELECTION_CATEGORIES, single_turn_dialogs
from seetjax.envs.bfcl.data import CATEGORIES
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.splits import SPLITS

_OUT = flags.DEFINE_string("out", None, "JSONL file to write.", required=True)
_SPLIT = flags.DEFINE_enum("split", "train", SPLITS, "BFCL scenario split.")
_CATEGORIES = flags.DEFINE_list("categories", list(CATEGORIES), "BFCL multi-turn categories.")
_STYLE = flags.DEFINE_enum("prompt_style", "native", ["bfcl", "native", "compact"],
                           "How tool docs are shown (seetjax.envs.bfcl.env.BfclEnvConfig).")
_FORMAT = flags.DEFINE_string("call_format", None, "python or hermes (default: the style's own).")
_PARALLEL = flags.DEFINE_bool("parallel_calls", False,
                              "All of a turn's calls in one assistant message.")

_SELECTION = flags.DEFINE_integer("single_turn_selection", 0,
                                  "tool_selection dialogs from single-turn entries (-1: all).")
_RETRIEVAL = flags.DEFINE_integer("single_turn_retrieval", 0,
                                  "tool_retrieval dialogs from single-turn entries (-1: all).")
_SINGLE_CATEGORIES = flags.DEFINE_list("single_turn_categories", list(SELECTION_CATEGORIES),
                                       "BFCL single-turn categories the dialogs come from.")
_K = flags.DEFINE_integer("retrieval_k", 5, "Tools a tool_retrieval prompt offers (BM25's top k).")
_SEED = flags.DEFINE_integer("seed", 0, "Which single-turn entries, and the order tools are shown.")


def main(argv):
    del argv
    dialogs = []
    if _CATEGORIES.value:
        dialogs, report = bfcl_dialogs(_SPLIT.value, _CATEGORIES.value, prompt_style=_STYLE.value,
                                       call_format=_FORMAT.value, parallel_calls=_PARALLEL.value)
        print(report)
    if _SELECTION.value or _RETRIEVAL.value:
        config = BfclEnvConfig(prompt_style=_STYLE.value, call_format=_FORMAT.value)
        try:
            single, single_report = single_turn_dialogs(
                config, _SELECTION.value, _RETRIEVAL.value,
                categories=_SINGLE_CATEGORIES.value, k=_K.value, seed=_SEED.value)
        except ValueError as e:
            raise app.UsageError(str(e)) from None
        dialogs += single
        print(single_report)
    count = write_jsonl(dialogs, _OUT.value)
    print(f"wrote {count} dialogs to {_OUT.value}; task types {type_counts(dialogs)}")


if __name__ == "__main__":
    app.run(main)
