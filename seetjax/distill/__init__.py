"""Agentic distillation: scenarios -> teacher pools -> validated, reviewed traces -> deduplicated
JSONL/Parquet shards -> SFT dialogs (see README, "Agentic distillation")."""

# Registers the families defined outside `scenarios` (the registry itself lives there).
from seetjax.distill import telecom  # noqa: F401
