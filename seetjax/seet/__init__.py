"""SEET's mechanics over any environment: the stages (`config`) and the curriculum through them
(`curriculum`), the first point of logical divergence (`fpld`), anchors (`anchors`), stage-2
ground-truth interception (`interception`), counterfactual records (`records`). An
environment's hints are its own (`envs/bfcl/hints.py`); the fast loop asks for them
(`rollout/episode.py`).

Imports `tools` and `config`; never `learner`, nor anything above.
"""
