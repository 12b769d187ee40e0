"""What the Locust users draw and send: the prompt and answer-length mixes, the API key's
header. The settings themselves are the config's (harness/config/load.py)."""

from __future__ import annotations

import os
import random

from harness.config.load import Share


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """The Authorization header for the key the environment variable holds (none if unset)."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ValueError(f"load.api_key_env names ${api_key_env}, which is not set or empty")
    return {"Authorization": f"Bearer {key}"}


def draw(mix: list[Share], rng: random.Random) -> int:
    return rng.choices([s.tokens for s in mix], weights=[s.weight for s in mix])[0]


def prompt_text(tokens: int, i: int) -> str:
    """A prompt of about `tokens` tokens (four characters each), unique per request."""
    return f"request {i}: " + "tell me more " * max(1, tokens // 3)
