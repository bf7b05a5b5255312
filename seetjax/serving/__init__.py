"""Serving seetjax policies: a continuous-batching engine (`engine.py`, no HTTP) and an
OpenAI-compatible chat-completions server on it (`app.py`, FastAPI)."""
