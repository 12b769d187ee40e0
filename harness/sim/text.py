"""Deterministic answers: the same prompt, seed and model version give the same tokens."""

from __future__ import annotations

import hashlib
import random

_WORDS = (
    "the model answers every question with care and the cluster keeps each stream "
    "alive while pods roll over to a new version of the engine so no answer is cut "
    "short and the gateway sends tokens as they come from the decoder in order"
).split()
_DEGRADED = ["lorem", "ipsum", "<unk>", "??", "ipsum", "lorem"]


def prompt_tokens(text: str) -> int:
    """A rough token count: about four characters a token, as for English BPE."""
    return max(1, len(text) // 4)


def answer(
    prompt: str,
    seed: int,
    model_version: str,
    *,
    max_tokens: int | None,
    ignore_eos: bool,
    min_tokens: int,
    natural_min: int,
    natural_max: int,
    degraded: bool,
) -> tuple[list[str], str]:
    """The answer's tokens and its finish_reason ('stop' or 'length')."""
    digest = hashlib.sha256(f"{model_version}\0{seed}\0{prompt}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    natural = rng.randint(natural_min, natural_max)
    natural = max(natural, min_tokens)
    if max_tokens is not None and (ignore_eos or max_tokens < natural):
        n, finish = max_tokens, "length"
    else:
        n, finish = natural, "stop"
    vocab = _DEGRADED if degraded else _WORDS
    tokens = [(" " if i else "") + rng.choice(vocab) for i in range(n)]
    return tokens, finish
