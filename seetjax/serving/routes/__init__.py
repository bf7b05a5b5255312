"""One router per resource: models, chat completions, health.

Each imports `serving.deps` (never `serving.app`, which imports the routes).
"""
