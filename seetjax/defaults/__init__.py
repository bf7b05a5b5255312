"""The model a config gets when it names none: the offline embedded default (`embedded`) and its
pretrained base, `model.path = "embedded:base"` (`base_model`, with `resolve_model_path`).

Imports `models`, `envs` (BFCL text and generated tasks for the tokenizer's corpus), `sft` (the
base is an SFT run), `runtime` and `report`. Above it: only `rl` and the launchers.
"""
