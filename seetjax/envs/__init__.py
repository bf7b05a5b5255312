"""Environments: the ToolEnv protocol and BFCL multi-turn tasks (plain Python, no JAX)."""
