"""One router per resource: models, chat completions, health."""
