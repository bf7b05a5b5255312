"""seetjax: training tool-calling LLM agents with SEET (Self-Play with Environment Tuning) in JAX."""

__version__ = "0.1.0"
