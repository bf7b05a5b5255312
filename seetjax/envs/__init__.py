"""Environments: the ToolEnv protocol, BFCL multi-turn and single-turn tasks (plain Python, no JAX).

Also: what SEET needs of one (`capabilities`), exact keys of its states (`state_keys`),
environments by name (`registry`), where a
run's tasks come from (`task_source`), retrieved toolsets (`tool_retrieval`), BFCL (`bfcl/`),
generated tasks (`generated/`), QA search (`qa_search/`).

Imports `tools`, `config` and `retrieval`; never `seet`, `rewards`, `rollout` or anything
above.
"""
