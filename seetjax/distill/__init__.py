"""Agentic distillation: scenarios -> teacher pools -> validated, reviewed traces -> deduplicated
JSONL/Parquet shards -> SFT dialogs (see README, "Agentic distillation").

Imports `serving` (its endpoint client), `data`, `envs` and `tools`; never `learner`.
"""

# Registers the families defined outside `scenarios` (the registry itself lives there).
from seetjax.distill import telecom  # noqa: F401
