"""seetjax: tool-calling LLM agents trained with SEET (Self-Play with Environment Tuning).

Packages by role, lowest layer first (docs/architecture.md; tests/test_import_graph.py keeps it):
batch, runtime, report, tools, losses | models | config, sampling, learner | retrieval | envs |
seet, rewards | rollout | data, eval | serving, sft | distill, defaults | rl. A package imports
only packages of lower layers, none of its own.
"""

__version__ = "0.1.0"
