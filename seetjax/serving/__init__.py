"""Serving seetjax policies: a continuous-batching engine (`engine.py`, no HTTP) and an
OpenAI-compatible chat-completions server on it (`app.py`, FastAPI).

`deps.py` holds what the routes share; `client.py` plays BFCL through any endpoint;
`rollout_policy.py` is the engine as an engine-driven rollout's model.
Imports `sampling`, `models`, `tools`, `rollout`, `envs` and `eval` (the client); never `sft`
(same layer), `distill` or `rl`.
"""
