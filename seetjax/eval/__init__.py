"""Evaluation: the BFCL multi-turn checker (official semantics) and reports."""
