"""Canary answer comparison: does the new version answer like the old one?

A model with wrong weights or a broken tokenizer answers 200 at normal latency and passes
every probe; only its answers show it. A golden prompt set is sent with greedy decoding
(temperature 0, a fixed seed) to a baseline and a candidate replica directly, and the
answers are compared in one of two modes:

- same: the same weights under a new engine (an engine upgrade). Answers must be
  identical (compared as text: an engine may coalesce tokens into one event) on at least
  `min_agreement` of the prompts; the first divergence of each is reported, as a token
  (content event) of the baseline's answer and a character. With `agree_after` N, an
  answer identical for its first N tokens agrees too: an engine whose greedy decoding is
  not batch-invariant flips a near-tie token late in an answer when the two sides were
  asked in other batches (real vLLM on CPU: first divergences at tokens 9 to 38), while
  other weights differ from the first token (docs/facts.md).
- new: new weights. The candidate is judged against the baseline's distribution: empty
  answers, repetition (repeated word 3-grams), length, finish_reason mix, non-printable or
  replacement characters, and expected substrings the baseline had and the candidate lost.

Pure functions from answers to a result, except `load_prompts` (a file) and `ask` (HTTP).
"""

from __future__ import annotations

import json
import statistics
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.errors import RollcheckError
from harness.verdict import Status

MODES = ("same", "new")
# new weights: how far the candidate may stray from the baseline before it fails
MAX_EMPTY_INCREASE = 0.10  # share of answers with no content
MAX_REPETITION_INCREASE = 0.15  # mean share of repeated word 3-grams
LENGTH_RATIO = (0.5, 2.0)  # median candidate length / median baseline length (words)
MAX_FINISH_SHIFT = 0.30  # change in the share of answers cut by max_tokens
MAX_BAD_CHAR_INCREASE = 0.01  # share of non-printable or U+FFFD characters
SIDE_BY_SIDE = 5  # worst prompts shown with both answers


class CanaryInputError(RollcheckError):
    """A prompt file that cannot be used (one line naming the file and line; exit 2)."""


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    expect: tuple[str, ...] = ()
    max_tokens: int = 64


DEFAULT_PROMPTS = [
    Prompt("capital", "What is the capital of France? Answer in one sentence.", ("Paris",)),
    Prompt("arithmetic", "What is 12 times 12? Give the number.", ("144",), 32),
    Prompt("list", "List three primary colours, comma separated.", (), 32),
    Prompt("code", "Write a Python function that returns the square of x.", ("def",), 96),
    Prompt("translate", "Translate 'good morning' into French.", ("bonjour",), 32),
    Prompt("summary", "Summarise in two sentences why rolling updates need drain time.", (), 96),
    Prompt("json", 'Return the JSON object {"ok": true} and nothing else.', ("ok",), 32),
    Prompt("long", "Explain how a GPU decodes tokens for a language model.", (), 256),
]


def load_prompts(path: Path | str | None) -> list[Prompt]:
    """JSON lines: {"prompt": str, "expect": [str, ...], "max_tokens": int, "id": str};
    only prompt is required. None: the shipped set."""
    if path is None or str(path) == "":
        return list(DEFAULT_PROMPTS)
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CanaryInputError(f"{path}: cannot read the prompt file ({exc.strerror})") from None
    out: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise CanaryInputError(f"{where}: not a JSON line ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"]:
            raise CanaryInputError(f'{where}: needs "prompt": a non-empty string')
        unknown = set(obj) - {"id", "prompt", "expect", "max_tokens"}
        if unknown:
            raise CanaryInputError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        expect = obj.get("expect", [])
        if not isinstance(expect, list) or not all(isinstance(e, str) and e for e in expect):
            raise CanaryInputError(f'{where}: "expect" must be a list of non-empty strings')
        mt = obj.get("max_tokens", 64)
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise CanaryInputError(f'{where}: "max_tokens" must be a positive integer, not {mt!r}')
        out.append(Prompt(str(obj.get("id") or f"line{n}"), obj["prompt"], tuple(expect), mt))
    if not out:
        raise CanaryInputError(f"{path}: no prompts (one JSON object a line)")
    ids = [p.id for p in out]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise CanaryInputError(f"{path}: the id {dup!r} is used twice")
    return out


@dataclass
class Answer:
    prompt_id: str
    outcome: str  # the stream judge's outcome: complete, http_error, connect_error, ...
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    request_id: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def ok(self) -> bool:
        return self.outcome == "complete"


def ask(
    url: str,
    prompts: list[Prompt],
    model: str | None,
    *,
    headers: dict | None = None,
    stall_timeout_s: float = 60.0,
    concurrency: int = 4,
    seed: int = 0,
    client_settings: dict | None = None,
) -> list[Answer]:
    """Each prompt once, greedy, streamed and judged; never raises for a bad server."""
    from harness.client import chat_payload, make_client, stream_request
    from harness.streams import Thresholds

    base = url.rstrip("/")
    endpoint = base if base.endswith("/chat/completions") else base + "/v1/chat/completions"
    th = Thresholds(stall_timeout_s)
    with make_client(stall_timeout_s, concurrency, **(client_settings or {})) as client:

        def one(p: Prompt) -> Answer:
            payload = chat_payload(model, p.prompt, p.max_tokens, temperature=0, seed=seed)
            r = stream_request(client, endpoint, payload, th, headers=headers, keep_text=True)
            return Answer(p.id, r.outcome, r.pieces or [], r.finish_reason, r.error, r.request_id)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(one, prompts))


# --- the comparison (pure) -------------------------------------------------------------


def repetition(text: str, n: int = 3) -> float:
    """The share of word n-grams that repeat an earlier one (0: none, near 1: a loop)."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def bad_chars(text: str) -> float:
    """The share of characters that are U+FFFD or non-printable (not whitespace)."""
    if not text:
        return 0.0
    bad = sum(
        1
        for ch in text
        if ch == "\ufffd" or (unicodedata.category(ch).startswith("C") and not ch.isspace())
    )
    return bad / len(text)


def first_divergence(a: str, b: str) -> int | None:
    """The index of the first character where two answers differ (None: identical)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def token_at(pieces: list[str], char: int) -> int:
    """Which content event holds a character of the answer. An engine may put several
    tokens in one event when its output falls behind (measured: vLLM did, with the same
    model and prompt, under two concurrent servers), so answers are compared as text and
    the position is given in the baseline's events."""
    seen = 0
    for i, p in enumerate(pieces):
        seen += len(p)
        if char < seen:
            return i
    return len(pieces)


def profile(answers: list[Answer], prompts: dict[str, Prompt]) -> dict:
    """The distribution new weights are judged by, for one side."""
    ok = [a for a in answers if a.ok]
    lengths = [len(a.text.split()) for a in ok]
    n = len(ok)
    return {
        "answers": len(answers),
        "complete": n,
        "empty": round(sum(not a.text.strip() for a in ok) / n, 4) if n else None,
        "repetition": round(statistics.fmean(repetition(a.text) for a in ok), 4) if n else None,
        "median_words": statistics.median(lengths) if lengths else None,
        "cut_by_max_tokens": round(sum(a.finish_reason == "length" for a in ok) / n, 4)
        if n
        else None,
        "bad_chars": round(statistics.fmean(bad_chars(a.text) for a in ok), 4) if n else None,
        "expected_missing": sum(
            1 for a in ok for e in prompts[a.prompt_id].expect if e.lower() not in a.text.lower()
        ),
    }


@dataclass
class PromptResult:
    prompt_id: str
    prompt: str
    baseline: str
    candidate: str
    baseline_outcome: str
    candidate_outcome: str
    agree: bool
    divergence: int | None  # the first token that differs
    differed: str  # what differed, in words
    score: float  # how bad: higher is worse (for the side-by-side table)


@dataclass
class CanaryResult:
    mode: str
    status: Status  # pass, fail, inconclusive
    observed: str
    expected: str
    reasons: list[str]
    prompts: list[PromptResult]
    baseline: dict
    candidate: dict
    agreement: float | None = None

    def worst(self, k: int = SIDE_BY_SIDE) -> list[PromptResult]:
        bad = [p for p in self.prompts if p.score > 0]
        return sorted(bad, key=lambda p: -p.score)[:k]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["worst"] = [asdict(p) for p in self.worst()]
        del d["prompts"]
        d["prompts_compared"] = len(self.prompts)
        return d


def _per_prompt(p: Prompt, b: Answer, c: Answer, mode: str, agree_after: int = 0) -> PromptResult:
    char = first_divergence(b.text, c.text) if b.ok and c.ok else None
    div = token_at(b.pieces, char) if char is not None else None
    late = mode == "same" and agree_after > 0 and div is not None and div >= agree_after
    agree = b.ok and c.ok and (char is None or late)
    if not c.ok:
        differed, score = f"candidate {c.outcome}: {c.error or 'no answer'}", 3.0
    elif not b.ok:
        differed, score = f"baseline {b.outcome}: not judged", 0.0
    elif char is None:
        differed, score = "identical", 0.0
    elif late:
        b_frag, c_frag = b.text[char : char + 12], c.text[char : char + 12]
        differed = (
            f"identical for {div} tokens, then {b_frag!r} -> {c_frag!r} (agrees: a late "
            f"flip, at or after token {agree_after})"
        )
        score = 0.5 / (1 + div)
    else:
        b_frag, c_frag = b.text[char : char + 12] or "(end)", c.text[char : char + 12] or "(end)"
        parts = [f"token {div} (char {char}): {b_frag!r} -> {c_frag!r}"]
        rep = repetition(c.text) - repetition(b.text)
        if rep > MAX_REPETITION_INCREASE:
            parts.append(f"repetition +{rep:.0%}")
        missing = [
            e for e in p.expect if e.lower() in b.text.lower() and e.lower() not in c.text.lower()
        ]
        if missing:
            parts.append("lost " + ", ".join(repr(m) for m in missing))
        if not c.text.strip():
            parts.append("empty")
        differed = "; ".join(parts)
        # in `same` mode every divergence counts; earlier ones are worse
        score = (1.0 if mode == "same" else 0.0) + 1 / (1 + div) + max(0.0, rep) + len(missing)
        score += 1.0 if not c.text.strip() else 0.0
    return PromptResult(
        p.id, p.prompt, b.text, c.text, b.outcome, c.outcome, agree, div, differed, round(score, 4)
    )


def compare(
    prompts: list[Prompt],
    baseline: list[Answer],
    candidate: list[Answer],
    mode: str = "same",
    min_agreement: float = 1.0,
    agree_after: int = 0,
) -> CanaryResult:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    by_id = {p.id: p for p in prompts}
    b_by, c_by = {a.prompt_id: a for a in baseline}, {a.prompt_id: a for a in candidate}
    rows = [
        _per_prompt(
            p,
            b_by.get(p.id) or Answer(p.id, "missing"),
            c_by.get(p.id) or Answer(p.id, "missing"),
            mode,
            agree_after,
        )
        for p in prompts
    ]
    bp, cp = profile(baseline, by_id), profile(candidate, by_id)
    judged = [r for r in rows if r.baseline_outcome == "complete"]
    if not judged:
        first = next((a for a in baseline if not a.ok), None)
        why = f" (first: {first.outcome}: {(first.error or '')[:200]})" if first else ""
        return CanaryResult(
            mode,
            Status.INCONCLUSIVE,
            "no baseline answer",
            "baseline answers to compare with",
            [f"the baseline answered none of the prompts{why}: check its URL and model name"],
            rows,
            bp,
            cp,
        )
    failed_requests = [r for r in judged if r.candidate_outcome != "complete"]
    reasons = []
    if failed_requests:
        reasons.append(
            f"the candidate did not answer {len(failed_requests)} of {len(judged)} prompts "
            f"({', '.join(sorted({r.candidate_outcome for r in failed_requests}))})"
        )
    agreement = sum(r.agree for r in judged) / len(judged)
    if mode == "same":
        same = (
            f"identical (or for their first {agree_after} tokens)" if agree_after else "identical"
        )
        observed = f"{sum(r.agree for r in judged)} of {len(judged)} answers {same}"
        expected = f"at least {min_agreement:.0%} {same} to the baseline's"
        if agreement < min_agreement:
            firsts = sorted(r.divergence for r in judged if r.divergence is not None)
            reasons.append(
                f"{agreement:.0%} of answers are {same} to the baseline's, below {min_agreement:.0%}"
                + (f"; first divergence at token {firsts[0]}" if firsts else "")
            )
    else:
        observed = (
            f"candidate: repetition {cp['repetition']}, median {cp['median_words']} words, "
            f"empty {cp['empty']}"
        )
        expected = "the baseline's distribution"
        reasons += _distribution_reasons(bp, cp, judged, by_id)
    status = Status.FAIL if reasons else Status.PASS
    return CanaryResult(
        mode, status, observed, expected, reasons, rows, bp, cp, round(agreement, 4)
    )


def _distribution_reasons(bp: dict, cp: dict, judged: list[PromptResult], by_id: dict) -> list[str]:
    if cp["complete"] == 0:
        return []  # already reported: the candidate did not answer
    out = []
    if cp["empty"] - bp["empty"] > MAX_EMPTY_INCREASE:
        out.append(f"empty answers {cp['empty']:.0%} (baseline {bp['empty']:.0%})")
    if cp["repetition"] - bp["repetition"] > MAX_REPETITION_INCREASE:
        out.append(
            f"repetition {cp['repetition']:.0%} of word 3-grams (baseline {bp['repetition']:.0%})"
        )
    if bp["median_words"] and cp["median_words"] is not None:
        ratio = cp["median_words"] / bp["median_words"]
        if not LENGTH_RATIO[0] <= ratio <= LENGTH_RATIO[1]:
            out.append(f"median length {ratio:.2f}x the baseline's")
    if abs(cp["cut_by_max_tokens"] - bp["cut_by_max_tokens"]) > MAX_FINISH_SHIFT:
        out.append(
            f"answers cut by max_tokens {cp['cut_by_max_tokens']:.0%} "
            f"(baseline {bp['cut_by_max_tokens']:.0%})"
        )
    if cp["bad_chars"] - bp["bad_chars"] > MAX_BAD_CHAR_INCREASE:
        out.append(f"non-printable or replacement characters {cp['bad_chars']:.1%}")
    lost = [r.prompt_id for r in judged if "lost " in r.differed]
    if lost:
        out.append(
            f"expected text the baseline had is missing in {len(lost)} answers ({', '.join(lost)})"
        )
    return out


def format_table(result: CanaryResult, width: int = 38) -> str:
    """The worst prompts side by side, for a terminal or a closing note."""

    def cut(s: str) -> str:
        s = s.replace("\n", " ")
        return s if len(s) <= width else s[: width - 1] + "…"

    lines = [
        f"canary ({result.mode}): {result.status.upper()}: {result.observed}",
        *(f"  - {r}" for r in result.reasons),
    ]
    worst = result.worst() if result.status == "fail" or result.mode == "same" else []
    if worst:
        lines.append(f"  {'prompt':<12} {'baseline':<{width}} {'candidate':<{width}} what differed")
        for p in worst:
            lines.append(
                f"  {p.prompt_id[:12]:<12} {cut(p.baseline):<{width}} {cut(p.candidate):<{width}} {p.differed}"
            )
    return "\n".join(lines)
