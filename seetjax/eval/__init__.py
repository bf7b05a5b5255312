"""The reusable evaluation harness: any policy or endpoint on BFCL multi-turn (`evaluate`) and
single-turn (`single_turn_eval`) tasks and on QA search (`qa_eval`), agent metrics
(`agent_metrics`), each environment's reports by name (`reports`), retrieved toolsets at
several k (`retrieval_sweep`). A training run's milestones and report are `rl`'s.

Imports `rollout`, `envs`, `seet`, `rewards`, `models`, `tools` and `report`; never `data`
(same layer), `rl`, `sft` or `serving`.
"""
