"""BFCL, everything specific to it: its data in the installed `bfcl-eval` (`data`), the
multi-turn task splits (`splits`), the multi-turn environment (`env`) and the single-turn tasks
(`single_turn`), their checks with bfcl_eval's semantics (`checker`, `single_turn_checker`), the
augmented environment's hints (`hints`) and bfcl_eval's own decoding of replies (`official`).

Imports `tools` and the environment-wide modules of `envs` (`base`, `state_copy`,
`tool_retrieval`); never another environment, nor anything above `envs`.
"""
