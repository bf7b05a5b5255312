"""The RL run: a config validated into a plan (`config`), the outer loop (`trainer`), the
parameter sets it trains (`policy_states`), its greedy evaluations and their milestones
(`evals`, `milestones`), report.md (`report`).

The top layer: may import every other package; nothing in seetjax imports it.
"""
