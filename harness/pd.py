"""pd_rollout's judgement: golden answers sent through the gateway while a prefill/decode
deployment rolls, each held to the old and the new version's own answers.

A decode engine continues from the KV a prefill engine computed. vLLM's NIXL handshake
compares the engines' version, the model's shape and the KV's layout, not the weights
(vllm-project/vllm #55776): during a rollout a new prefill and an old decode (or the
reverse) pass it, and the answer is built from two models. With greedy decoding a golden
prompt's answer is its version's own; one that is neither the old nor the new version's
was built from both, and is a mixed answer.

The decode pod of an answer is the gateway's (its upstream); the prefill pod is the
decode pod's route (its routing sidecar's log: the prefill engine whose KV it read).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

# the simulator's decode role logs each KV it read, refused or could not read
# (harness/sim/app.py): "P/D chatcmpl-<id>: KV from <host:port> (weights ...)", or
# "P/D chatcmpl-<id>: KV read from <host:port>: ...; ..." / "handshake with <host:port>: ..."
ROUTE = re.compile(
    r"P/D (?:chatcmpl|cmpl)-(?P<rid>\S+): (?P<how>KV from|KV read from|handshake with) "
    r"(?P<remote>[^\s:]+:\d+)(?P<rest>.*)$"
)


def _lines(path: Path):
    """A decode pod's log, line by line with memory bounded (harness.engine_logs); none
    when it is not there."""
    from harness.engine_logs import log_lines

    return log_lines(Path(path)) if Path(path).is_file() else ()


def routes_in_log(path: Path) -> dict[str, tuple[str, str]]:
    """request id -> (the prefill engine's host:port, what became of its KV: read,
    recomputed or failed), from one decode pod's log."""
    found: dict[str, tuple[str, str]] = {}
    for line in _lines(path):
        m = ROUTE.search(line)
        if m is None:
            continue
        if m["how"] == "KV from":
            kv = "read"
        elif "computed here again" in m["rest"]:
            kv = "recomputed"
        else:
            kv = "failed"
        found[m["rid"]] = (m["remote"], kv)
    return found


# a prefill the decode's sidecar could not get (harness/sim/app.py): "P/D <id>: prefill at
# <url>: <why>", and "...; prefilled here instead (fallback)" when the decode computed it
FAILED_PREFILL = re.compile(
    r"P/D (?P<rid>\S+): prefill at \S+: (?P<why>.*?)(?P<fb>; prefilled here instead \(fallback\))?$"
)


def decode_fallbacks(paths) -> dict:
    """The decode pods' view of the prefills that failed: how many each way (passed on as
    the client's error, or computed on the decode instead), and why, from their logs."""
    out = {"passed_on": 0, "fallback": 0, "why": {}}
    for path in paths:
        for line in _lines(path):
            m = FAILED_PREFILL.search(line)
            if m is None:
                continue
            out["fallback" if m["fb"] else "passed_on"] += 1
            # one kind, whatever the address or port it names
            why = re.sub(r"\d+\.\d+\.\d+\.\d+|\b\d{4,}\b", "...", m["why"])[:80]
            out["why"][why] = out["why"].get(why, 0) + 1
    return out


def held_by(spans: dict, address: str | None, t: float) -> str | None:
    """The pod that held `address` at t (harness.timeline's spans), or None."""
    from harness.timeline import trace

    span, _ = trace(spans, address, t)
    return span.pod if span is not None else None


@dataclass
class GoldenAnswer:
    """One golden prompt's answer through the gateway while the roles rolled."""

    prompt_id: str
    sent_at: float
    ended_at: float
    outcome: str  # the stream judge's: complete, error_event, ...
    text: str
    request_id: str
    decode_pod: str | None = None  # the gateway's upstream
    prefill_pod: str | None = None  # the decode pod's route
    kv: str | None = None  # read, recomputed, failed (the decode's log); None: not logged
    version: str | None = None  # the old version's, the new's, "mixed"; None: broken

    def to_dict(self) -> dict:
        return asdict(self) | {"text": self.text[:200]}


def classify(
    answers: list[GoldenAnswer], old: dict[str, str], new: dict[str, str], versions: tuple[str, str]
) -> None:
    """Each complete answer's version: the old one's when its text is the old version's
    golden answer, the new one's when it is the new's, "mixed" when neither; a broken
    answer (or one to a prompt with no golden answer on a side) keeps None."""
    for a in answers:
        a.version = None
        if a.outcome != "complete" or a.prompt_id not in old or a.prompt_id not in new:
            continue
        if a.text == old[a.prompt_id]:
            a.version = versions[0]
        elif a.text == new[a.prompt_id]:
            a.version = versions[1]
        else:
            a.version = "mixed"


def summarize(answers: list[GoldenAnswer], t_act: float) -> dict:
    """The counts by version, and the mixing: how many, when the first and the last
    mixed answer were sent (seconds after the act), and the pods that built them."""
    counts: dict[str, int] = {}
    for a in answers:
        key = a.version or "broken"
        counts[key] = counts.get(key, 0) + 1
    mixed = sorted((a for a in answers if a.version == "mixed"), key=lambda a: a.sent_at)
    pairs: dict[tuple[str, str], int] = {}
    for a in mixed:
        pair = (a.decode_pod or "a decode pod not traced", a.prefill_pod or "a prefill not logged")
        pairs[pair] = pairs.get(pair, 0) + 1
    out: dict = {"counts": counts, "mixed": len(mixed), "answers": len(answers)}
    if mixed:
        out |= {
            "first_mixed_s": round(mixed[0].sent_at - t_act, 2),
            "last_mixed_s": round(mixed[-1].ended_at - t_act, 2),
            "mixing_s": round(mixed[-1].ended_at - mixed[0].sent_at, 2),
            "pairs": [
                {"decode_pod": d, "prefill_pod": p, "answers": n}
                for (d, p), n in sorted(pairs.items(), key=lambda kv: -kv[1])
            ],
        }
    return out


# --- the golden prompts through the gateway, while the roles roll --------------------------


class GoldenLoop:
    """Golden prompts sent through the gateway in turn, `streams` at a time, greedy, from
    start() to stop(): each answer with when it was sent and ended."""

    def __init__(self, url: str, prompts: list, model: str | None, *, headers: dict,
                 stall_timeout_s: float, streams: int = 2):  # fmt: skip
        import threading

        self.url, self.prompts, self.model = url, prompts, model
        self.headers, self.stall_timeout_s = headers, stall_timeout_s
        self.answers: list[GoldenAnswer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"golden-{i}", daemon=True)
            for i in range(streams)
        ]

    def ask_each(self) -> dict:
        """Each golden prompt once, one at a time: prompt id -> its answer."""
        from harness.canary import ask

        answers = ask(self.url, self.prompts, self.model, headers=self.headers,
                      stall_timeout_s=self.stall_timeout_s, concurrency=1)  # fmt: skip
        return {a.prompt_id: a for a in answers}

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float) -> list[GoldenAnswer]:
        """Stop sending; the answers (each stream ends, or is judged hung, on its own)."""
        import time

        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return sorted(self.answers, key=lambda a: a.sent_at)

    def _run(self, offset: int) -> None:
        import time

        from harness.canary import ask

        i = offset
        while not self._stop.is_set():
            p = self.prompts[i % len(self.prompts)]
            i += len(self._threads)
            sent = time.time()
            (a,) = ask(self.url, [p], self.model, headers=self.headers,
                       stall_timeout_s=self.stall_timeout_s, concurrency=1)  # fmt: skip
            answer = GoldenAnswer(p.id, sent, time.time(), a.outcome, a.text, a.request_id)
            with self._lock:
                self.answers.append(answer)
