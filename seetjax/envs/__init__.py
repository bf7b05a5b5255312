"""Environments: the ToolEnv protocol, BFCL multi-turn and single-turn tasks (plain Python, no JAX)."""
