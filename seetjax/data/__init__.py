"""Agent SFT data: dialogs (JSONL) and their BFCL source, formatting into token ids and loss masks,
the grain pipeline with task-weighted sampling and replay, coreset selection.

Modules: `dialogs` (data model), `bfcl_dialogs` (BFCL ground truth -> dialogs), `formatter`,
`weighting` and `pipeline` (grain), `scoring` and `coreset`, `replay`. Nothing is re-exported here,
so reading dialogs does not import JAX.

Imports `rollout` (chat formatting, QA oracle teams), `envs`, `retrieval`, `losses`,
`models` and `tools`; never `eval` (same layer), `sft` or anything above.
"""
