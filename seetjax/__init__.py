"""seetjax: tool-calling LLM agents trained with SEET (Self-Play with Environment Tuning)."""

__version__ = "0.1.0"
