"""An endpoint evaluation's first request: an endpoint that cannot be reached or refuses us (a
wrong API key, an unknown model) fails the evaluation before any work, named, instead of every
episode failing into a 0% report."""

from __future__ import annotations

import os

from seetjax.serving.client import EndpointPolicy


class EndpointUnusable(RuntimeError):
    """The endpoint cannot be reached, or refused a first request."""


def check_endpoint(policy: EndpointPolicy, api_key_env: str) -> None:
    """One 1-token request with `policy`'s client (its retries included); raises
    EndpointUnusable naming the endpoint, the model and what went wrong (`api_key_env`: where
    the key was read, named when it was refused)."""
    import openai

    config = policy.config
    try:
        policy.client.chat.completions.create(
            model=config.model, max_tokens=1,
            messages=[{"role": "user", "content": "Reply with one word."}])
    except openai.APIStatusError as e:
        key = (f"; check --api_key_env={api_key_env} (the variable is "
               f"{'set' if os.environ.get(api_key_env) else 'unset'})"
               if e.status_code in (401, 403) else "")
        raise EndpointUnusable(f"--endpoint={config.url} (--model={config.model}) refused a "
                               f"first request: HTTP {e.status_code}: {e.message}{key}") from None
    except openai.APIConnectionError as e:
        raise EndpointUnusable(f"--endpoint={config.url}: cannot connect ({e}; after "
                               f"{config.max_retries} retries)") from None
