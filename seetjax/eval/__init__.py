"""Evaluation: the BFCL multi-turn and single-turn checkers (official semantics) and reports."""
