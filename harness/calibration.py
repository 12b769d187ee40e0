"""Real engines on the machine at hand: warmed before they are judged, measured before the
first scenario, and the SLOs the session judges them by.

A CPU engine on a laptop or a CI machine is not a GPU fleet, and a busy machine is
slower still: a TTFT SLO written for one says nothing about a deployment run on the
other. So with `engine.kind: vllm` the session measures one engine before its first
scenario, unloaded (one request at a time) and with a full batch (max_num_seqs requests
sent together, what one replica carries while another drains), each with the load's
longest prompt (a CPU engine's first token is mostly the prompt's prefill: 0.8 s for a
short prompt, 5 s for the load's 149 tokens here), and judges TTFT by
whichever is more: the SLO in force, or three times the full batch's slowest first
token. An SLO given with --set is kept as it is; one below what this machine can do is
said before acting, not discovered as a FAIL.

`calibrate` is pure (figures in, SLOs and lines out); `measure` and `warm_up` talk to
an engine.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.streams import StreamRecord

LOAD_MARGIN = 3.0  # the calibrated TTFT SLO over the slowest first token of a full batch
ROUND_TO_S = 0.5
WARM_TOKENS = 8
MEASURE_TOKENS = 32
UNLOADED_REQUESTS = 3


@dataclass(frozen=True)
class EngineFigures:
    """What one engine does on this machine, measured after its warm-up."""

    ttft_unloaded_s: float  # median first token, one request at a time
    itl_unloaded_s: float  # median gap between tokens, one request at a time
    ttft_full_batch_s: float  # the slowest first token of a full batch sent together
    itl_full_batch_s: float  # the median gap between tokens in that batch
    batch: int  # the batch: the engine's max_num_seqs
    prompt_tokens: int | None = None  # the measuring prompts' length, as the engine counted it

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Calibration:
    figures: EngineFigures
    ttft_s: float  # the TTFT SLO the session judges by
    itl_s: float | None
    lines: tuple[str, ...]  # what to tell the user before acting
    warnings: tuple[str, ...]  # configured SLOs this machine cannot meet

    def as_dict(self) -> dict:
        return {
            "figures": self.figures.as_dict(),
            "slo": {"ttft_s": self.ttft_s, "itl_s": self.itl_s},
            "lines": list(self.lines),
            "warnings": list(self.warnings),
        }


def calibrate(
    figures: EngineFigures, ttft_s: float, itl_s: float | None, explicit: frozenset[str]
) -> Calibration:
    """The SLOs to judge by on this machine. explicit: the config keys the user set
    (slo.ttft_s, slo.itl_s); those are kept, with a warning when this machine cannot
    meet them."""
    f = figures
    lines = [
        f"measured one engine on this machine: TTFT {f.ttft_unloaded_s:.2f} s unloaded, "
        f"{f.ttft_full_batch_s:.2f} s at worst in a batch of {f.batch}; inter-token "
        f"{f.itl_unloaded_s * 1000:.0f} ms unloaded, {f.itl_full_batch_s * 1000:.0f} ms in "
        "the batch" + (f" ({f.prompt_tokens}-token prompts)" if f.prompt_tokens else "")
    ]
    warnings = []
    if "slo.ttft_s" in explicit:
        judged_ttft = ttft_s
        lines.append(f"judging TTFT by slo.ttft_s {ttft_s:g} s (set)")
        if ttft_s <= f.ttft_unloaded_s:
            warnings.append(
                f"slo.ttft_s {ttft_s:g} s is not above this machine's unloaded TTFT "
                f"({f.ttft_unloaded_s:.2f} s): nearly every request will breach it; raise it "
                "or leave it unset to judge by this machine's"
            )
        elif ttft_s <= f.ttft_full_batch_s:
            warnings.append(
                f"slo.ttft_s {ttft_s:g} s is not above this machine's TTFT in a full batch "
                f"({f.ttft_full_batch_s:.2f} s): requests on a loaded replica (during a "
                "drain, the load of two) will breach it"
            )
    else:
        loaded = _round_up(LOAD_MARGIN * f.ttft_full_batch_s)
        judged_ttft = max(ttft_s, loaded)
        lines.append(
            f"judging TTFT by {judged_ttft:g} s: the larger of the engine's default "
            f"{ttft_s:g} s and {LOAD_MARGIN:g} x the full batch's slowest first token "
            "(--set slo.ttft_s=N to judge by your own)"
        )
    if itl_s is not None:
        lines.append(f"judging inter-token gaps by slo.itl_s {itl_s:g} s")
        if itl_s <= f.itl_full_batch_s:
            warnings.append(
                f"slo.itl_s {itl_s:g} s is not above this machine's inter-token time in a "
                f"full batch ({f.itl_full_batch_s:.3f} s): loaded replicas will breach it"
            )
    return Calibration(f, judged_ttft, itl_s, tuple(lines), tuple(warnings))


def _round_up(seconds: float) -> float:
    return math.ceil(seconds / ROUND_TO_S) * ROUND_TO_S


def figures_from(
    unloaded: Sequence[StreamRecord], batch: Sequence[StreamRecord]
) -> EngineFigures | None:
    """The figures from the measuring requests, or None when any of them broke (an
    engine that cannot answer a few short requests is not one to measure)."""
    if not unloaded or not batch or any(r.broken or r.ttft_s is None for r in [*unloaded, *batch]):
        return None

    def gap(records: Sequence[StreamRecord]) -> float:
        gaps = [r.itl_p50_s for r in records if r.itl_p50_s is not None]
        return statistics.median(gaps) if gaps else 0.0

    counted = [
        r.usage["prompt_tokens"]
        for r in [*unloaded, *batch]
        if isinstance(r.usage, dict) and isinstance(r.usage.get("prompt_tokens"), int)
    ]
    return EngineFigures(
        ttft_unloaded_s=round(statistics.median(r.ttft_s for r in unloaded), 3),
        itl_unloaded_s=round(gap(unloaded), 4),
        ttft_full_batch_s=round(max(r.ttft_s for r in batch), 3),
        itl_full_batch_s=round(gap(batch), 4),
        batch=len(batch),
        prompt_tokens=max(counted) if counted else None,
    )


# --- talking to an engine ----------------------------------------------------------------


def _requests(
    url: str,
    model: str | None,
    n: int,
    tokens: int,
    parallel: int,
    client_settings: dict | None,
    headers: dict | None = None,
    prompt_tokens: int | None = None,
) -> list[StreamRecord]:
    """n streamed requests of `tokens` tokens, `parallel` at a time (1: one after another),
    each with a prompt of about prompt_tokens (None: a short one)."""
    from harness.client import chat_payload, make_client, stream_request
    from harness.streams import Thresholds
    from loadgen.settings import prompt_text

    endpoint = url.rstrip("/") + "/v1/chat/completions"
    th = Thresholds(stall_timeout_s=60.0)
    with make_client(60.0, parallel, **(client_settings or {})) as client:

        def one(i: int) -> StreamRecord:
            prompt = (
                f"warm-up {i}: count to ten"
                if prompt_tokens is None
                else prompt_text(prompt_tokens, i)
            )
            payload = chat_payload(model, prompt, tokens, ignore_eos=True)
            return stream_request(client, endpoint, payload, th, headers=headers)

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            return list(pool.map(one, range(n)))


def warm_up(
    url: str,
    model: str | None,
    n: int,
    client_settings=None,
    headers=None,
    prompt_tokens: int | None = None,
) -> list[StreamRecord]:
    """n short answers, one after another, to prompts of about prompt_tokens (the load's
    longest; None: a short prompt): a just-started engine compiles on its first requests
    (seconds each on a CPU), which the steady state must not count as TTFT, and warming
    with short prompts leaves a longer prompt's first prefill cold (real vLLM on CPU:
    the load's first 149-token prompts took 15-24 s on an engine warmed with short ones,
    4.6-5.3 s on one warmed with long ones, docs/facts.md)."""
    return _requests(url, model, n, WARM_TOKENS, 1, client_settings, headers, prompt_tokens)


def measure(
    url: str,
    model: str | None,
    batch: int,
    prompt_tokens: int,
    client_settings=None,
    headers=None,
) -> tuple[list[StreamRecord], list[StreamRecord]]:
    """The measuring requests on one warmed engine, each with a prompt of about
    prompt_tokens (the load's longest): unloaded, then a full batch."""
    cs, p = client_settings, prompt_tokens
    unloaded = _requests(url, model, UNLOADED_REQUESTS, MEASURE_TOKENS, 1, cs, headers, p)
    together = _requests(url, model, batch, MEASURE_TOKENS, batch, cs, headers, p)
    return unloaded, together
