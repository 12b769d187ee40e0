"""report.html: one self-contained page per run; index.html over a pytest session.

Charts are inline SVG drawn here: no script or network is needed to see them, the
file is deterministic and small (a 10,000-stream run stays well under 10 MB),
and it opens offline in any browser. A few lines of inline script only filter
the broken-streams table.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import urllib.parse
from collections import Counter
from pathlib import Path

from harness.errors import RollcheckError
from harness.events import Event, EventKind, read_events
from harness.files import BadInput, read_json, write_atomic
from harness.progress import clock
from harness.streams import StreamRecord, read_jsonl
from harness.streams.summary import count_flags, count_outcomes, latency_summary
from harness.timeline import pod_lives
from harness.verdict import overall as session_verdict
from harness.weights import ms_text

COLORS = {
    "complete": "#2e7d32",
    "cancelled": "#9e9e9e",
    "missing_done": "#f9a825",
    "truncated": "#ef6c00",
    "reset": "#c62828",
    "hung": "#6a1b9a",
    "aborted": "#d84315",
    "error_event": "#ad1457",
    "http_error": "#4527a0",
    "connect_error": "#283593",
    "not_sse": "#5d4037",
}
VERSION_COLORS = ["#1565c0", "#00897b", "#7b1fa2", "#f4511e", "#546e7a"]
MARKED_EVENTS = {
    EventKind.SIGTERM: "#e65100",
    EventKind.SIGKILL: "#b71c1c",
    EventKind.EXITED: "#424242",
    EventKind.ENDPOINT_REMOVED: "#0277bd",
    EventKind.SIGNAL: "#b71c1c",
    EventKind.PREEMPTED: "#8e24aa",
    EventKind.NODE_LOST: "#37474f",
}
MAX_POINTS = 20_000  # streams drawn; beyond that, complete ones are sampled
W, LEFT, RIGHT = 1100, 170, 20

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:22px;margin:0 0 4px} .why{font-size:15px;margin:6px 0} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.verdict{display:inline-block;padding:3px 12px;border-radius:4px;color:#fff;font-weight:700}
.pass{background:#2e7d32}.fail{background:#c62828}.inconclusive{background:#ef6c00}.na{background:#757575}
.goodput{font-size:18px;font-weight:600;margin-left:14px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:left}
th{background:#fafafa} .num{text-align:right;font-variant-numeric:tabular-nums}
.hint{color:#6d4c41;margin:2px 0 10px 0} .muted{color:#777} svg{background:#fff;border:1px solid #eee}
code{font-size:12px} .swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
input{padding:4px 8px;width:320px}
table.canary td{vertical-align:top;max-width:380px} table.canary pre{white-space:pre-wrap;margin:0;font-size:12px}
"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(x, unit="s", nd=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return _e(x)  # not a number (a summary edited by hand): shown as text, escaped
    return f"{x:.{nd}f} {unit}".strip()


def _signed(x, nd: int = 1) -> str:
    """Seconds from the act with their sign (+1.5); anything else as escaped text."""
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return _e(x)
    return f"{x:+.{nd}f}"


def _pct(x, nd: int = 1) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return _e(x)
    return f"{x:.{nd}%}"


def _href(*parts: str) -> str:
    """A link to a file below the page's own folder: each part percent-encoded, so a
    folder named `javascript:...` (its colon encoded) or holding a quote stays a
    relative path."""
    return "/".join(urllib.parse.quote(str(p), safe="") for p in parts)


class ReportInputError(RollcheckError):
    """A folder that is not what a report page needs (one line, exit 2)."""


VERDICTS = ("pass", "fail", "inconclusive", "skipped", "n/a")


def read_summary(path: Path) -> dict:
    """A run's summary.json as the pages need it, or ReportInputError (one line)."""
    try:
        s = read_json(path)
    except BadInput as exc:
        raise ReportInputError(
            f"{exc}; rerun `rollcheck report {path.parent}` or remove the run"
        ) from None
    if s.get("verdict") not in VERDICTS:
        raise ReportInputError(
            f"{path} is not a rollcheck summary (verdict {str(s.get('verdict'))[:40]!r})"
        )
    for key, kind in (("outcomes", dict), ("checks", list), ("goodput", dict), ("name", str)):
        if s.get(key) is not None and not isinstance(s[key], kind):
            raise ReportInputError(
                f"{path}: {key} is a {type(s[key]).__name__}, not a {kind.__name__}"
            )
    return s


def passed_over(lines: list[str]) -> str:
    """The section naming each run whose summary.json could not be read (index, history)."""
    if not lines:
        return ""
    items = "".join(f"<li><code>{_e(line)}</code></li>" for line in lines)
    return (
        f"<h2>Runs passed over ({len(lines)}): their summary.json could not be read</h2>"
        f"<ul>{items}</ul>"
    )


def load_run(run_dir: Path) -> tuple[dict, list[StreamRecord], list[Event]]:
    run_dir = Path(run_dir)
    records = (
        list(read_jsonl(run_dir / "records.jsonl")) if (run_dir / "records.jsonl").exists() else []
    )
    events = read_events(run_dir / "events.jsonl") if (run_dir / "events.jsonl").exists() else []
    if (run_dir / "summary.json").exists():
        summary = read_json(run_dir / "summary.json")
        if not isinstance(summary.get("latency") or {}, dict):
            raise BadInput(f"{run_dir / 'summary.json'}: latency is not an object")
    else:  # a folder from `rollcheck load` or `probe` without a scenario verdict
        summary = {
            "scenario": run_dir.name,
            "target": "?",
            "verdict": "n/a",
            "requests": len(records),
            "outcomes": count_outcomes(records),
            "flags": count_flags(records),
            "checks": [],
            "latency": {"all": latency_summary(records)},
        }
    return summary, records, events


def write_report(run_dir: Path) -> Path:
    summary, records, events = load_run(run_dir)
    path = Path(run_dir) / "report.html"
    try:
        page = render(summary, records, events)
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
        # a summary.json edited by hand, or from another tool: one line, not a traceback
        raise BadInput(
            f"{Path(run_dir) / 'summary.json'}: a value of a shape rollcheck does not write "
            f"({type(exc).__name__}: {str(exc)[:80]}); rerun the run to write it again"
        ) from None
    write_atomic(path, page)
    return path


def verdict_class(verdict: str) -> str:
    return verdict if verdict in ("pass", "fail", "inconclusive") else "na"


def goodput_text(summary: dict, phase: str = "all") -> str:
    g = (summary.get("goodput") or {}).get(phase) or {}
    if g.get("share") is None:
        return "–"
    share = g["share"]  # plain text: every caller escapes it
    shown = f"{share:.1%}" if isinstance(share, (int, float)) else str(share)
    return f"{shown} ({g.get('good')} of {g.get('requests')})"


def render(summary: dict, records: list[StreamRecord], events: list[Event]) -> str:
    t_act = summary.get("t_act")
    t0 = t_act or min((r.sent_at for r in records), default=min((e.t for e in events), default=0.0))
    verdict = summary.get("verdict", "n/a")
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>rollcheck {_e(summary.get('scenario'))}: {_e(verdict)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_e(summary.get('name') or summary.get('scenario'))} "
        f"<span class='verdict {verdict_class(verdict)}'>{_e(verdict.upper())}</span>"
        + (
            f"<span class=goodput>goodput {_e(goodput_text(summary))}</span>"
            if summary.get("goodput")
            else ""
        )
        + "</h1>",
        "<nav class=muted><a href='../index.html'>the session</a> · "
        "<a href='../../history.html'>the history of every night</a></nav>",
        f"<div class=muted>scenario {_e(summary.get('scenario'))} · target {_e(summary.get('target'))}"
        f" · {_e(summary.get('requests', 0))} requests · times are seconds from the disruption</div>",
        _why(summary),
        _under_test(summary, records),
        _actions(events, t0),
        _failed_checks(summary),
        _evidence(summary),
        _canary_section(summary.get("canary")),
        _weighted_section(summary.get("weighted_canary")),
        _shadow_section(summary.get("shadow")),
        _pd_section(summary.get("pd_rollout")),
        _pd_prefill_section(summary.get("pd_prefill")),
        _lint_section(summary.get("lint") or []),
        _calibration_section(summary.get("calibration")),
        _outcome_table(summary),
        _engine_counts_section(summary.get("engine_counts")),
        _scaler_section(summary.get("scaler")),
        "<h2>Timeline</h2>",
        _legend(),
        _timeline_svg(
            records,
            events,
            t0,
            ((summary.get("config") or {}).get("slo") or {}).get("ttft_s"),
            window=_window(summary),
        ),
        _zoom_section(summary, records, events, t0),
        _rollout_table(summary),
        "<h2>Streams that did not complete</h2>",
        _broken_table(records, events, t0, summary.get("victims") or []),
        "<h2>Goodput and SLOs before, during and after</h2>",
        _goodput_table(summary),
        "<h2>Latency before, during and after</h2>",
        _latency_table(summary.get("latency") or {}),
        "<h2>Gateway</h2>",
        _gateway_table(summary.get("gateway")),
        "<h2>Load generator</h2>",
        _loadgen(summary.get("load_generator")),
        "<h2>All checks</h2>",
        _all_checks(summary),
        _FILTER_JS,
        "</body></html>",
    ]
    return "\n".join(parts)


def verdict_sentence(summary: dict) -> str:
    """Why the verdict is what it is, in one sentence: the checks that decided it, or for
    a PASS below full goodput the budgets that allowed it."""
    verdict = str(summary.get("verdict", ""))
    checks = [c for c in summary.get("checks") or [] if isinstance(c, dict)]
    if verdict == "skipped":
        return f"SKIPPED: {summary.get('reason') or 'the target could not run it'}."
    if verdict in ("fail", "inconclusive"):
        deciding = [c for c in checks if c.get("status") == verdict]
        said = "; ".join(
            f"{c.get('name')}: {check_text(c.get('reason') or c.get('observed'))}"
            + (f" (expected {check_text(c.get('expected'))})" if verdict == "fail" else "")
            for c in deciding[:3]
        )
        more = f" and {len(deciding) - 3} more" if len(deciding) > 3 else ""
        return f"{verdict.upper()} because of {said or 'a check'}{more}."
    judged = [c for c in checks if c.get("status") == "pass"]
    share = ((summary.get("goodput") or {}).get("all") or {}).get("share")
    text = f"PASS: every one of the {len(judged)} checks that judged this run passed"
    if isinstance(share, (int, float)) and share < 1:
        budgets = [
            f"{c.get('name')} ({check_text(c.get('observed'))}; allowed {check_text(c.get('expected'))})"
            for c in judged
            if str(c.get("name", "")).endswith("_slo_budget")
        ]
        text += f"; goodput {share:.1%} is within the budgets: " + (
            "; ".join(budgets) or "none set"
        )
    return text + "."


def _why(summary: dict) -> str:
    return f"<p class=why>{_e(verdict_sentence(summary))}</p>"


def _under_test(summary: dict, records: list[StreamRecord]) -> str:
    """The configuration under test (what it changes from the defaults) and the engine
    versions the answers came from."""
    changes = summary.get("config_changes") or []
    seen = sorted({r.system_fingerprint for r in records if r.system_fingerprint})
    models = sorted({r.model for r in records if r.model})
    parts = [
        "Configuration under test: "
        + ("; ".join(str(c) for c in changes) if changes else "the defaults")
        + "."
    ]
    if seen or models:
        parts.append(
            "Answers came from "
            + ", ".join(filter(None, [", ".join(models), ", ".join(seen)]))
            + "."
        )
    return f"<p class=muted>{_e(' '.join(parts))}</p>"


def _actions(events: list[Event], t0: float) -> str:
    acts = [
        e
        if e.kind == EventKind.ACTION
        else Event(e.t, "action", e.pod, e.node, e.version, {"action": "restored"} | e.detail)
        for e in events
        if (e.kind == EventKind.ACTION and e.detail.get("action") != "health_probe")
        or e.kind == EventKind.RESTORED
    ]  # the restore (the target put back as it was) is what was done too
    if not acts:
        return "<p class=muted>No actions recorded.</p>"
    rows = "".join(
        f"<tr><td class=num>{e.t - t0:+.2f}</td><td>{_e(e.detail.get('action'))}</td>"
        f"<td>{_e(_action_detail(e))}</td></tr>"
        for e in acts[:50]
    )
    return f"<h2>What was done</h2><table><tr><th>t</th><th>action</th><th>detail</th></tr>{rows}</table>"


def _action_detail(e: Event) -> str:
    """An action's pod and detail as words ("rollcheck-sim-v1-3, signal: SIGKILL"), never
    a dict's repr."""
    rest = {
        k.replace("_", " "): v
        for k, v in e.detail.items()
        if k != "action" and v not in (None, "", {}, [])
    }
    parts = [e.pod] if e.pod else []
    if rest:
        parts.append(check_text(rest))
    return ", ".join(parts) or "–"


def _failed_checks(summary: dict) -> str:
    checks = summary.get("checks", [])
    failed = [c for c in checks if c.get("status", "pass" if c["passed"] else "fail") == "fail"]
    unsure = [c for c in checks if c.get("status") == "inconclusive"]
    if not failed and not unsure:
        return "<h2>Checks</h2><p>Every check passed.</p>" if checks else ""
    out = ""
    if failed:
        items = "".join(
            f"<li><b>{_e(c['name'])}</b>: {_e(check_sentence(c))}"
            f"{'<div class=hint>hint: ' + _e(c['hint']) + '</div>' if c.get('hint') else ''}</li>"
            for c in failed
        )
        out += f"<h2>Failed checks</h2><ul>{items}</ul>"
    if unsure:
        items = "".join(f"<li><b>{_e(c['name'])}</b>: {_e(check_sentence(c))}</li>" for c in unsure)
        out += f"<h2>Inconclusive checks (no evidence, no pass)</h2><ul>{items}</ul>"
    return out


def check_sentence(c: dict) -> str:
    """A check as a sentence: what it judged, what it saw against what it expected, the
    requests that broke it (an INCONCLUSIVE one: why there was no evidence)."""
    if c.get("status") == "inconclusive":
        return f"no evidence either way: {check_text(c.get('reason'))}."
    judged = check_text(c.get("population"))
    text = (
        f"judged {judged}, it saw {check_text(c.get('observed'))} where "
        f"{check_text(c.get('expected'))} was expected"
    )
    ids = [str(r) for r in c.get("requests") or []]
    if ids:
        more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
        text += f"; broken: {', '.join(ids[:3])}{more} (in the table below)"
    return text + "."


def _evidence(summary: dict) -> str:
    """Attribution coverage, the gateway's unparsed lines and what /health said."""
    att = summary.get("attribution")
    if not att:
        return ""
    out = f"<h2>Evidence</h2><p>{_e(att['text'])}."
    if att.get("gateway_logs") is None:
        out += " No gateway logs were read: streams are judged by time and count, not by pod."
    out += "</p>"
    if att.get("first_unparsed_line"):
        out += f"<p>First unparsed gateway line: <code>{_e(att['first_unparsed_line'])}</code></p>"
    health = summary.get("health_during_drain")
    if health:
        answers = ", ".join(
            f"{n}x {'no answer' if k in (None, 'None', 'null') else k}"
            for k, n in sorted(health.items(), key=lambda kv: str(kv[0]))
        )
        out += f"<p>/health of the drained pod while it drained: {_e(answers)}</p>"
    return out


def _goodput_table(summary: dict) -> str:
    sig, gp = summary.get("signals") or {}, summary.get("goodput") or {}
    if not sig:
        return "<p class=muted>No phases for this run.</p>"
    slo = summary.get("slo") or {}
    budgets = (slo.get("budgets") or {}).get("ttft") or {}
    rows = "".join(
        f"<tr><td>{_e(p)}</td><td class=num>{_e(v['requests'])}</td>"
        f"<td class=num>{_e(goodput_text(summary, p) if gp.get(p) else '–')}</td>"
        f"<td class=num>{_e(v['ttft_slo_breach'] + v.get('no_first_token', 0))}</td>"
        f"<td class=num>{_pct(budgets.get(p, 0), 0)}</td>"
        f"<td class=num>{_e(v['missing_done'])}</td><td class=num>{_e(v['truncated'])}</td>"
        f"<td class=num>{'–' if v['gateway_499'] is None else _e(v['gateway_499'])}</td></tr>"
        for p, v in sig.items()
    )
    return (
        f"<p class=muted>{_e(_slo_text(slo))}. "
        "Goodput: completed within the SLOs. A request with no first token counts as a TTFT "
        "breach.</p><table><tr><th>phase</th><th>requests</th><th>goodput</th>"
        "<th>TTFT breaches</th><th>budget</th><th>missing [DONE]</th><th>truncated</th>"
        f"<th>gateway 499</th></tr>{rows}</table>"
    )


CANARY_PROFILE = (
    ("complete", "answers complete"),
    ("empty", "empty share"),
    ("repetition", "repeated word 3-grams"),
    ("median_words", "median length (words)"),
    ("cut_by_max_tokens", "cut by max_tokens"),
    ("bad_chars", "non-printable / U+FFFD"),
    ("expected_missing", "expected text missing"),
)


def _candidates_line(serving: list | None) -> str:
    """How many candidate pods served while the answers were compared (one: a gate)."""
    if serving is None:
        return ""
    n = len(serving)
    pods = ", ".join(f"<code>{_e(p)}</code>" for p in serving)
    return f"<p>Candidate pods serving while the answers were compared: <b>{n}</b> ({pods})" + (
        "; the rollout held at one until judged.</p>" if n == 1 else ".</p>"
    )


def _canary_section(c: dict | None) -> str:
    """The canary's answers next to the baseline's: the worst prompts side by side."""
    if not c:
        return ""
    head = (
        f"<h2>Canary answers: {_e(c['status'].upper())}, {_e(c.get('action', ''))}</h2>"
        f"<p>{_e(c['prompts_compared'])} golden prompts, greedy, asked of "
        f"<code>{_e(c.get('baseline_pod'))}</code> (baseline) and "
        f"<code>{_e(c.get('candidate_pod'))}</code> (canary) directly; mode "
        f"<b>{_e(c['mode'])}</b> weights. {_e(c['observed'])}.</p>"
        + _candidates_line(c.get("candidate_pods_serving"))
    )
    reasons = "".join(f"<li>{_e(r)}</li>" for r in c.get("reasons") or [])
    rows = "".join(
        f"<tr><td><b>{_e(p['prompt_id'])}</b><div class=muted>{_e(p['prompt'][:120])}</div></td>"
        f"<td><pre>{_e(p['baseline'][:600])}</pre></td><td><pre>{_e(p['candidate'][:600])}</pre>"
        f"</td><td>{_e(p['differed'])}</td></tr>"
        for p in c.get("worst") or []
    )
    side = (
        "<table class=canary><tr><th>prompt</th><th>baseline answer</th><th>canary answer</th>"
        f"<th>what differed</th></tr>{rows}</table>"
        if rows
        else "<p>Every answer agreed with the baseline's.</p>"
    )
    b, k = c.get("baseline") or {}, c.get("candidate") or {}
    profile = "".join(
        f"<tr><td>{_e(label)}</td><td class=num>{_e(b.get(key))}</td>"
        f"<td class=num>{_e(k.get(key))}</td></tr>"
        for key, label in CANARY_PROFILE
    )
    return (
        head
        + (f"<ul>{reasons}</ul>" if reasons else "")
        + side
        + "<table><tr><th></th><th>baseline</th><th>canary</th></tr>"
        + profile
        + "</table>"
        + _profile_note(c, b, k)
    )


def _weighted_section(w: dict | None) -> str:
    """weighted_canary's steps as judged live (what promoted or rolled back the candidate):
    per step the weight, the share the candidate served, and its streams against the
    baseline's. The checks above judge every step again on the final records."""
    if not w:
        return ""
    golden = w.get("golden") or {}
    head = (
        f"<h2>Weighted canary: {_e(w.get('version'))}, {_e(w.get('action'))}</h2>"
        f"<p>Golden answers before any traffic moved: {_e(str(golden.get('status', '')).upper())}"
        f" ({_e(golden.get('prompts_compared'))} prompts, asked of "
        f"<code>{_e(golden.get('baseline_pod'))}</code> and "
        f"<code>{_e(w.get('candidate_pod'))}</code> directly). Steps asked: "
        + ", ".join(f"{_e(f'{p:g}')}%" for p in w.get("steps_asked") or [])
        + ". Each step as judged at its end, on the streams sent in it that had ended by "
        f"then (at least {_e(w.get('min_samples'))} of the candidate's and as many as its "
        "weight gives that, or the step's longest window).</p>"
    )
    rows = []
    for step in w.get("steps") or []:
        share, tol = step.get("share"), step.get("tolerance")
        shown = f"{share:.0%}" if share is not None else "none traced"
        if isinstance(tol, (int, float)) and math.isfinite(tol):
            shown += f" (±{tol * 100:.0f} points)"
        ttft = (step.get("compared") or {}).get("TTFT") or {}
        medians = (
            f"{ms_text(ttft.get('baseline_median_s'))} / {ms_text(ttft.get('candidate_median_s'))}"
        )
        why = "; ".join((step.get("reasons") or []) + (step.get("unknown") or []))
        status = str(step.get("status", ""))
        cells = [
            f"{step.get('percent', 0):g}%",
            step.get("requests"),
            step.get("candidate"),
            shown,
            medians,
            step.get("broken"),
        ]
        rows.append(
            "<tr>"
            + "".join(f"<td class=num>{_e(c)}</td>" for c in cells)
            + f"<td class={verdict_class(status)}>{_e(status.replace('_', ' '))}</td>"
            + f"<td>{_e(why or 'as good as the baseline')}</td></tr>"
        )
    table = (
        "<table><tr><th>weight</th><th>streams</th><th>to the candidate</th><th>its share</th>"
        "<th>TTFT median, baseline / candidate</th><th>its broken streams</th><th>step</th>"
        f"<th>why</th></tr>{''.join(rows)}</table>"
        if rows
        else "<p>No step ran: the golden answers stopped the candidate first.</p>"
    )
    return head + table


def _shadow_section(sh: dict | None) -> str:
    """shadow: what was mirrored, what the candidate's engines did with it, and the two
    sides' latency from their own histograms (the checks above judge them)."""
    if not sh:
        return ""
    from harness.histograms import ITL, TTFT, count, quantile

    def hist(side: str, family: str) -> list:
        rows = ((sh.get("histograms") or {}).get(side) or {}).get(family) or []
        return [(math.inf if b == "+Inf" else float(b), n) for b, n in rows]

    finished = sh.get("candidate_finished") or {}
    done = ", ".join(f"{n} {reason}" for reason, n in finished.items()) or "nothing"
    rows = "".join(
        f"<tr><td>{_e(label)}</td>"
        + "".join(
            f"<td class=num>{_e(ms_text(quantile(hist(side, family), q)))}</td>"
            for side in ("baseline", "candidate")
            for q in (0.5, 0.9)
        )
        + "".join(
            f"<td class=num>{_e(count(hist(side, family)))}</td>"
            for side in ("baseline", "candidate")
        )
        + "</tr>"
        for family, label in ((TTFT, "TTFT"), (ITL, "inter-token latency"))
    )
    golden = sh.get("golden") or {}
    percent = sh.get("percent")
    share = f"{percent:g}% of the requests" if isinstance(percent, (int, float)) else "requests"
    lines = sh.get("mirrored")
    logged = (
        f"{len(lines)} requests mirrored to"
        if isinstance(lines, list)
        else "The gateway keeps no line per mirrored request; mirrored to"
    )
    return (
        f"<h2>Shadow: {_e(sh.get('version'))}, {_e(share)} mirrored</h2>"
        f"<p>{_e(logged)} "
        f"{_e(', '.join(sh.get('candidate_pods') or []))}, their answers discarded; its engines "
        f"finished {_e(done)} (finished_reason, their own counters). Golden answers, asked "
        f"directly: {_e(str(golden.get('status', '')).upper())}.</p>"
        "<table><tr><th>engines' histograms</th><th>baseline median</th><th>baseline p90</th>"
        "<th>candidate median</th><th>candidate p90</th><th>baseline observations</th>"
        f"<th>candidate observations</th></tr>{rows}</table>"
    )


def _pd_section(pd: dict | None) -> str:
    """pd_rollout: the golden answers sent while the roles rolled, by the version they
    are, and each mixed one with the decode and prefill pods that built it."""
    if not pd:
        return ""
    versions = pd.get("versions") or ["", ""]
    s = pd.get("summary") or {}
    counts = s.get("counts") or {}
    order = str(pd.get("order", "")).replace("_", " ")
    finished = pd.get("roles_finished_s") or {}
    rolled = "; ".join(f"{_e(role)} rolled by {_signed(t)} s" for role, t in finished.items())
    said = ", ".join(
        f"{counts.get(k, 0)} {label}"
        for k, label in (
            (versions[0], f"{versions[0]}'s own"),
            (versions[1], f"{versions[1]}'s own"),
            ("mixed", "mixed (neither)"),
            ("broken", "broken"),
        )
        if counts.get(k)
    )
    rows = "".join(
        f"<tr><td class=num>{_signed(a.get('sent_s'))}</td>"
        f"<td>{_e(a.get('prompt_id'))}</td>"
        f"<td>{_e(a.get('decode_pod') or 'not traced')}</td>"
        f"<td>{_e(a.get('prefill_pod') or 'not logged')}</td>"
        f"<td>{_e(a.get('kv') or 'not logged')}</td></tr>"
        for a in pd.get("answers") or []
        if a.get("version") == "mixed"
    )
    table = (
        "<table><tr><th>sent</th><th>prompt</th><th>decode pod</th><th>prefill pod</th>"
        f"<th>its KV</th></tr>{rows}</table>"
        if rows
        else ""
    )
    mixing = (
        f" Mixed answers from {_signed(s.get('first_mixed_s'))} s to "
        f"{_signed(s.get('last_mixed_s'))} s ({_fmt(s.get('mixing_s'), 's', 1)})."
        if s.get("mixed")
        else ""
    )
    return (
        f"<h2>P/D rollout to {_e(versions[1])}, {_e(order)}</h2>"
        f"<p>{rolled}. {_e(s.get('answers', 0))} golden answers through the gateway while "
        f"the roles rolled: {_e(said or 'none')}.{mixing}</p>{table}"
    )


PREFILL_ACTS = {"drain": "drained", "kill": "killed"}


def _pd_prefill_section(p: dict | None) -> str:
    """pd_prefill: the prefills in flight on the victim (on the whole role, scaled to zero)
    at the act, each with how and when it ended (the prefill Service's log), when the role
    served again, and what the decode pods did with the prefills that failed (their logs)."""
    if not p:
        return ""
    act, victim = p.get("act"), p.get("victim")
    title = (
        "the prefill role scaled to zero"
        if act == "to_zero"
        else f"prefill pod {victim} {PREFILL_ACTS.get(act, act)}"
    )
    back = p.get("prefill_recovered_s")
    served = (
        "The prefill role did not serve again within scenario.recovery_s."
        if back is None
        else f"The prefill role served again {_fmt(back, 's', 1)} after the act."
    )
    view = p.get("decode_view") or {}
    why = view.get("why") or {}
    decode = (
        f"The decode pods passed {_e(view.get('passed_on', 0))} failed prefills on as their "
        f"client's error and prefilled {_e(view.get('fallback', 0))} themselves"
        + (
            ": " + "; ".join(f"{_e(n)} × {_e(w)}" for w, n in list(why.items())[:5]) + "."
            if why
            else "."
        )
    )
    waiting = p.get("waiting") or []
    rows = "".join(
        f"<tr><td><code>{_e(w.get('request_id') or 'no request id')}</code></td>"
        f"<td class=num>{_e(w.get('status'))}</td>"
        f"<td class=num>{_e(w.get('upstream_status') or '–')}</td>"
        f"<td class=num>{_signed(w.get('ended_s'))}</td></tr>"
        for w in waiting
    )
    table = (
        "<table><tr><th>prefill request</th><th>answered</th><th>upstream</th>"
        f"<th>ended</th></tr>{rows}</table>"
        if rows
        else "<p class=muted>No prefill was in flight there at the act.</p>"
    )
    return (
        f"<h2>P/D prefill: {_e(title)}</h2><p>{len(waiting)} prefills in flight there at the "
        f"act (the prefill Service's log), each as it ended. {served} {decode}</p>{table}"
    )


def _profile_note(c: dict, b: dict, k: dict) -> str:
    """Why a profile figure that looks bad does not decide the verdict (expected text
    missing on both sides under a PASS: the golden prompts' hints, not the gate)."""
    bm, km = b.get("expected_missing"), k.get("expected_missing")
    if not isinstance(bm, int) or not isinstance(km, int) or (bm == 0 and km == 0):
        return ""
    gate = (
        "in mode same the answers' agreement with the baseline's decides the verdict"
        if c.get("mode") == "same"
        else "in mode new the canary is judged against the baseline's distribution"
    )
    return (
        f"<p class=muted>Expected text is missing {km} times in the canary's answers and "
        f"{bm} in the baseline's. Only expected text the baseline's answer had and the "
        f"canary's lost counts against the canary (a prompt the baseline misses too says "
        f"nothing about the upgrade); {gate}.</p>"
    )


def _calibration_section(c: dict | None) -> str:
    """The real engine measured on this machine, and the SLOs the run was judged by."""
    if not c:
        return ""
    lines = "".join(f"<li>{_e(line)}</li>" for line in c.get("lines") or [])
    warnings = "".join(f"<li class=hint>{_e(w)}</li>" for w in c.get("warnings") or [])
    return f"<h2>This machine</h2><ul>{lines}{warnings}</ul>"


def _lint_section(findings: list[dict]) -> str:
    if not findings:
        return ""
    rows = "".join(
        f"<tr><td>{_e(f['severity'])}</td><td>{_e(f['rule'])}</td><td>{_e(f['object'])}</td>"
        f"<td><code>{_e(f['path'])}</code></td><td>{_e(f['why'])}<div class=hint>fix: {_e(f['fix'])}"
        "</div></td></tr>"
        for f in findings
    )
    return (
        "<h2>Preflight findings on the live Deployment</h2><table><tr><th>severity</th>"
        f"<th>rule</th><th>object</th><th>field</th><th>why / fix</th></tr>{rows}</table>"
    )


def _outcome_table(summary: dict) -> str:
    outcomes = summary.get("outcomes", {})
    cells = "".join(
        f"<tr><td><span class=swatch style='background:{COLORS.get(k, '#000')}'></span>{_e(k)}</td>"
        f"<td class=num>{_e(v)}</td></tr>"
        for k, v in outcomes.items()
        if v or k == "complete"
    )
    flags = "".join(
        f"<tr><td>flag {_e(k)}</td><td class=num>{_e(v)}</td></tr>"
        for k, v in (summary.get("flags") or {}).items()
        if v
    )
    return (
        f"<h2>Outcomes</h2><table><tr><th>outcome</th><th>streams</th></tr>{cells}{flags}</table>"
    )


def _engine_counts_section(counts: dict | None) -> str:
    """What the engines themselves counted: beside the clients' outcomes above."""
    if not counts or not counts.get("samples"):
        return ""
    finished = counts.get("finished") or {}
    cells = (
        "".join(
            f"<tr><td>{_e(reason)}</td><td class=num>{_e(n)}</td></tr>"
            for reason, n in finished.items()
        )
        or "<tr><td colspan=2>none counted</td></tr>"
    )
    around = counts.get("at_act") or {}
    gauges = ""
    for side in ("before", "after"):
        g = around.get(side)
        if g:
            gauges += (
                f"<li>{side} the act ({_e(g['t'])} s): {_e(g['running'])} running, "
                f"{_e(g['waiting'])} waiting</li>"
            )
    return (
        "<h2>What the engines counted</h2><p class=muted>vllm:request_success_total by "
        f"finished_reason over {_e(len(counts.get('pods') or []))} engines "
        f"({_e(counts.get('samples'))} reads; an engine that exited is counted up to its "
        "last read)</p><table><tr><th>finished_reason</th><th>requests</th></tr>"
        f"{cells}</table>" + (f"<ul>{gauges}</ul>" if gauges else "")
    )


def _scaler_section(scaler: dict | None) -> str:
    """The workload's own scaler: its decisions on the scenario's clock, and after a load
    step its lag to ask for replicas and theirs to be ready."""
    if not scaler:
        return ""
    rows = "".join(
        f"<tr><td class=num>{_e(r['at_s'])}</td><td>{_e(r['what'])}</td></tr>"
        for r in scaler.get("timeline") or []
    )
    lag = ""
    if scaler.get("asked_after_step_s") is not None:
        ready = ", ".join(
            f"{_e(n['pod'])} ready at +{_e(n['ready_after_step_s'])} s"
            for n in scaler.get("new_replicas") or []
        )
        lag = (
            f"<p>After the load step the scaler asked for more replicas at "
            f"+{_e(scaler['asked_after_step_s'])} s; {ready or 'no new replica was ready'}.</p>"
        )
    return (
        f"<h2>The scaler's decisions</h2>{lag}<table><tr><th>t</th><th>decision</th></tr>"
        f"{rows}</table>"
    )


def _legend() -> str:
    items = "".join(
        f"<span class=swatch style='background:{c}'></span>{k}" for k, c in COLORS.items()
    )
    marks = "".join(
        f"<span class=swatch style='background:{c}'></span>{k}" for k, c in MARKED_EVENTS.items()
    )
    return f"<div class=muted>streams: {items}<br>pod events: {marks}</div>"


class _Scale:
    """Linear, and clamped to its range: what lies outside the window is drawn at its edge."""

    def __init__(self, lo: float, hi: float, a: float, b: float):
        self.lo, self.hi, self.a, self.b = lo, hi if hi > lo else lo + 1, a, b

    def __call__(self, v: float) -> float:
        v = min(max(v, self.lo), self.hi)
        return round(self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a), 1)


WINDOW_MARGIN_S = 2.0


def _window(summary: dict) -> tuple[float, float] | None:
    """The scenario's own span (steady state to the end of the load), with a margin:
    on a real cluster pods are hours old, and their history is not the scenario."""
    start, end = summary.get("t_start"), summary.get("t_end")
    if start is None or end is None:
        return None
    return start - WINDOW_MARGIN_S, end + WINDOW_MARGIN_S


def _common_prefix(names: list[str]) -> str:
    """The prefix all pod names share, up to its last '-' (named once, not cut off)."""
    if len(names) < 2:
        return ""
    prefix = os.path.commonprefix(names)
    return prefix[: prefix.rfind("-") + 1] if "-" in prefix else ""


def _pod_spans(events: list[Event]) -> list[dict]:
    marks: dict[str, list[tuple[float, str]]] = {}
    for e in events:
        if e.pod and e.kind in MARKED_EVENTS:
            marks.setdefault(e.pod, []).append((e.t, e.kind))
    return [
        {
            "pod": life.pod,
            "version": life.version,
            "node": life.node,
            "created": life.first_seen,
            "ready": life.ready,
            "terminating": life.terminating,
            "removed": life.removed,
            "marks": marks.get(life.pod, []),
        }
        for life in pod_lives(events)
    ]


def _version_colors(spans: list[dict], records: list[StreamRecord]) -> dict[str, str]:
    versions = sorted({s["version"] or "?" for s in spans} | {r.version or "?" for r in records})
    return {v: VERSION_COLORS[i % len(VERSION_COLORS)] for i, v in enumerate(versions)}


def _pod_lane(
    out: list[str],
    spans: list[dict],
    x: _Scale,
    lo: float,
    hi: float,
    t0: float,
    y: int,
    vcolor: dict[str, str] | None = None,
) -> int:
    """One row per pod alive in [lo, hi]: starting, ready, terminating, and its signal
    marks; names after their common prefix. Returns the y below the lane."""
    vcolor = vcolor or _version_colors(spans, [])
    prefix = _common_prefix([s["pod"] for s in spans])
    title = f"pods ({prefix}…)" if prefix else "pods"
    out.append(f"<text x=8 y={y - 6} font-size=12 font-weight=600>{_e(title)}</text>")
    alive = [
        s
        for s in spans
        if (s["removed"] or hi + t0) - t0 >= lo and s["created"] - t0 <= hi  # else not drawn
    ]
    for s in sorted(alive, key=lambda s: s["created"]):
        end = (s["removed"] or hi + t0) - t0
        created, ready = s["created"] - t0, (s["ready"] or end + t0) - t0
        term = (s["terminating"] or end + t0) - t0
        c = vcolor.get(s["version"] or "?", VERSION_COLORS[0])
        out.append(f"<text x=8 y={y + 9} font-size=10>{_e(s['pod'][len(prefix) :])}</text>")
        if created < lo:  # started before the window: its history is clipped, and says so
            out.append(
                f"<text x={LEFT + 2} y={y + 9} font-size=9 fill=#555 class=clipped>◀ created "
                f"{created:+.0f} s</text>"
            )
        out.append(
            f"<rect x={x(created)} y={y} width={max(1, x(ready) - x(created))} height=10 "
            f"fill={c} opacity=0.3><title>{_e(s['pod'])} starting</title></rect>"
        )
        if s["ready"]:
            out.append(
                f"<rect x={x(ready)} y={y} width={max(1, x(term) - x(ready))} height=10 "
                f"fill={c}><title>{_e(s['pod'])} {_e(s['version'])} ready</title></rect>"
            )
        if s["terminating"]:
            out.append(
                f"<rect x={x(term)} y={y} width={max(1, x(end) - x(term))} height=10 "
                f"fill=#ff9800 opacity=0.6><title>{_e(s['pod'])} terminating</title></rect>"
            )
        for t, kind in s["marks"]:
            if lo <= t - t0 <= hi:
                out.append(
                    f"<rect x={x(t - t0) - 1} y={y - 2} width=2 height=14 "
                    f"fill={MARKED_EVENTS[kind]}><title>{kind} {t - t0:+.2f} s</title></rect>"
                )
        y += 14
    return y


def _timeline_svg(
    records: list[StreamRecord],
    events: list[Event],
    t0: float,
    slo: float | None = None,
    window: tuple[float, float] | None = None,
) -> str:
    spans = _pod_spans(events)
    times = [r.sent_at for r in records] + [r.ended_at for r in records] + [e.t for e in events]
    if not times:
        return "<p class=muted>Nothing to draw: no records and no events.</p>"
    lo, hi = min(times) - t0, max(times) - t0
    if window is not None:
        lo, hi = window[0] - t0, window[1] - t0
    x = _Scale(lo, hi, LEFT, W - RIGHT)
    out: list[str] = []
    y = _pod_lane(out, spans, x, lo, hi, t0, 20, _version_colors(spans, records))
    pods_bottom = y
    y = _in_flight_lane(out, records, x, lo, t0, y + 16)
    drawn = _sample(records)
    y = _streams_lane(out, records, drawn, x, t0, y)
    y = _ttft_lane(out, drawn, x, t0, y, slo)
    out.append(
        f"<line x1={LEFT} x2={W - RIGHT} y1={pods_bottom + 4} y2={pods_bottom + 4} stroke=#eee/>"
    )
    return _finish_svg("timeline", out, events, x, lo, hi, t0, y)


def _in_flight_lane(out: list[str], records, x: _Scale, lo: float, t0: float, y: float) -> float:
    """The streams in flight over time; returns the next lane's top."""
    h2 = 60
    out.append(f"<text x=8 y={y + 10} font-size=12 font-weight=600>in flight</text>")
    edges = sorted(
        [(r.sent_at - t0, 1) for r in records] + [(r.ended_at - t0, -1) for r in records]
    )
    level, peak, pts = 0, 1, [(lo, 0)]
    for t, d in edges:
        pts.append((t, level))
        level += d
        pts.append((t, level))
        peak = max(peak, level)
    ys = _Scale(0, peak, y + h2, y)
    if len(pts) > 4000:
        pts = pts[:: len(pts) // 4000 + 1]
    out.append(
        "<polyline fill=none stroke=#1565c0 stroke-width=1 points='"
        + " ".join(f"{x(t)},{ys(v)}" for t, v in pts)
        + "'/>"
    )
    out.append(f"<text x={LEFT - 4} y={y + 8} font-size=10 text-anchor=end>{peak}</text>")
    return y + h2 + 20


def _streams_lane(out: list[str], records, drawn, x: _Scale, t0: float, y: float) -> float:
    """Each stream at its start, height = duration, coloured by outcome (drawn: the
    sample drawn; the scale is every record's)."""
    h3 = 120
    out.append(f"<text x=8 y={y + 10} font-size=12 font-weight=600>streams</text>")
    out.append(f"<text x=8 y={y + 24} font-size=10>(start, duration)</text>")
    dmax = max((r.duration_s for r in records), default=1.0)
    yd = _Scale(0, dmax, y + h3, y)
    for r in drawn:
        out.append(
            f"<circle cx={x(r.sent_at - t0)} cy={yd(r.duration_s)} r={3 if r.broken else 1.6} "
            f"fill={COLORS.get(r.outcome, '#000')}><title>{_e(r.request_id)} {r.outcome} "
            f"{_e(r.pod)}</title></circle>"
        )
    out.append(f"<text x={LEFT - 4} y={y + 8} font-size=10 text-anchor=end>{dmax:.1f} s</text>")
    return y + h3 + 20


def _ttft_lane(out: list[str], drawn, x: _Scale, t0: float, y: float, slo) -> float:
    """Each stream's TTFT against the SLO."""
    h4 = 100
    out.append(f"<text x=8 y={y + 10} font-size=12 font-weight=600>TTFT</text>")
    ttfts = [r for r in drawn if r.ttft_s is not None]
    tmax = max([r.ttft_s for r in ttfts] + [0.001])
    if slo:
        tmax = max(tmax, slo * 1.2)
    yt = _Scale(0, tmax, y + h4, y)
    if slo:
        out.append(
            f"<line x1={LEFT} x2={W - RIGHT} y1={yt(slo)} y2={yt(slo)} stroke=#c62828 "
            f"stroke-dasharray='4 3'><title>SLO {slo} s</title></line>"
        )
        out.append(
            f"<text x={LEFT - 4} y={yt(slo) + 3} font-size=10 text-anchor=end>SLO {slo} s</text>"
        )
    for r in ttfts:
        out.append(
            f"<circle cx={x(r.sent_at - t0)} cy={yt(r.ttft_s)} r=1.6 "
            f"fill={'#c62828' if 'ttft_slo_breach' in r.flags else '#1565c0'}/>"
        )
    return y + h4 + 10


def _finish_svg(
    svg_id: str, out: list[str], events: list[Event], x: _Scale, lo, hi, t0: float, y: int
) -> str:
    """Actions and the target's own replica-count decisions as vertical lines across
    every lane, each with a visible label; the time axis; the svg element."""
    from harness.timeline import count_decisions

    lines = [
        (e, _action_label(e), "#d32f2f", "")
        for e in events
        if e.kind == EventKind.ACTION and e.detail.get("action") not in ("health_probe",)
    ]
    lines += [
        (e, label, "#6a1b9a", " stroke-dasharray='6 3'") for e, label in count_decisions(events)
    ]
    lines.sort(key=lambda line: line[0].t)
    shown = 0
    for e, what, color, dash in lines:
        if lo <= e.t - t0 <= hi:
            label = _label(f"{what} {e.t - t0:+.2f} s")
            out.append(
                f"<line class=act x1={x(e.t - t0)} x2={x(e.t - t0)} y1=8 y2={y} stroke={color} "
                f"stroke-width=1.5{dash}><title>{_e(label)}</title></line>"
            )
            # a visible label beside each line, staggered so that near ones do not
            # cover each other
            out.append(
                f"<text class=act {_beside(x(e.t - t0), label)} y={9 + 10 * (shown % 3)} "
                f"font-size=9 fill={color}>{_e(label)}</text>"
            )
            shown += 1
    for i in range(11):
        t = lo + (hi - lo) * i / 10
        out.append(f"<text x={x(t)} y={y + 14} font-size=10 text-anchor=middle>{t:+.1f}</text>")
    svg = (
        f"<svg id={svg_id} xmlns='http://www.w3.org/2000/svg' width={W} height={y + 24} "
        f"viewBox='0 0 {W} {y + 24}'>" + "".join(out) + "</svg>"
    )
    return _quote_attributes(svg)


def _action_label(e: Event) -> str:
    """What an action line says: the act and its pod ("kill rollcheck-sim-v1-2")."""
    what = str(e.detail.get("action") or "act")
    who = e.pod or e.detail.get("node") or e.detail.get("pod") or ""
    return f"{what} {who}".strip()


ZOOM_MARGIN_S = 1.0
ZOOM_ROWS = 150  # streams drawn as bars in the zoomed view; broken ones always


def _zoom_window(summary: dict, records: list[StreamRecord], events: list[Event]):
    """The disruption up close: from just before the act (or the first signal to a victim)
    to the last broken stream's end or the victims' exit, whichever is later."""
    from harness.timeline import BREAKING

    t_act = summary.get("t_act")
    if t_act is None:
        return None
    victims = set(summary.get("victims") or [])
    # the act's consequences: on its victims; with none named (a scaler chose the replica
    # to remove, as in scale_to_zero), on any pod after the act, up to the run's end
    end = summary.get("t_end")

    def hit(e: Event) -> bool:
        if victims and e.pod not in victims:
            return False
        if not victims and (e.pod is None or e.t < t_act or (end is not None and e.t > end)):
            return False
        return (e.kind in BREAKING and e.t >= t_act - 1) or (
            e.kind == EventKind.POD_REMOVED and e.t >= t_act
        )

    hits = [e.t for e in events if hit(e)]
    ends = [r.ended_at for r in records if r.broken and r.ended_at >= t_act - 1]
    lo = min([t_act] + hits) - ZOOM_MARGIN_S
    hi = max([t_act + 5] + hits + ends) + ZOOM_MARGIN_S
    if summary.get("t_end") is not None:
        hi = min(hi, summary["t_end"] + WINDOW_MARGIN_S)
    return lo, max(hi, lo + 2)


def _zoom_section(summary: dict, records, events, t0: float) -> str:
    window = _zoom_window(summary, records, events)
    if window is None:
        return ""
    return (
        f"<h2>The disruption, up close ({window[0] - t0:+.1f} s to {window[1] - t0:+.1f} s)</h2>"
        + _zoom_svg(records, events, t0, window, set(summary.get("victims") or []))
    )


def _zoom_svg(
    records: list[StreamRecord], events: list[Event], t0: float, window, victims=()
) -> str:
    """Each stream in flight during the disruption as its own bar, under the pods' events,
    grouped by the pod that served it (each group named; the act's victims marked)."""
    lo, hi = window[0] - t0, window[1] - t0
    x = _Scale(lo, hi, LEFT, W - RIGHT)
    spans = _pod_spans(events)
    out: list[str] = []
    y = _pod_lane(out, spans, x, lo, hi, t0, 20, _version_colors(spans, records))
    inside = [r for r in records if r.sent_at - t0 <= hi and r.ended_at - t0 >= lo]
    broken = [r for r in inside if r.broken]
    ok = [r for r in inside if not r.broken]
    room = max(0, ZOOM_ROWS - len(broken))
    shown = broken + ok[:: max(1, -(-len(ok) // room))] if room else broken
    shown.sort(key=lambda r: (r.pod or "~", r.sent_at))
    y += 14
    out.append(f"<text x=8 y={y + 4} font-size=12 font-weight=600>streams</text>")
    out.append(f"<text x=8 y={y + 18} font-size=10>one bar each, by pod</text>")
    row = 4
    group = object()  # no pod yet
    for r in shown:
        if r.pod != group:  # a new pod's group: its name (and whether it was the victim)
            group = r.pod
            y += 6
            name = r.pod or "not traced to a pod"
            mark = " ◀ victim" if r.pod in victims else ""
            out.append(
                f"<text class=pod x={LEFT - 4} y={y + 3} font-size=9 text-anchor=end "
                f"fill={'#b71c1c' if mark else '#555'}>{_e(name[-24:])}{mark}</text>"
            )
        thick = 3 if r.broken else 2
        out.append(
            f"<rect class=bar x={x(r.sent_at - t0)} y={y} "
            f"width={max(1, x(r.ended_at - t0) - x(r.sent_at - t0))} height={thick} "
            f"fill={COLORS.get(r.outcome, '#000')}><title>{_e(r.request_id)} {r.outcome} "
            f"{_e(r.pod or 'pod not traced')} {r.sent_at - t0:+.2f} .. {r.ended_at - t0:+.2f} s"
            "</title></rect>"
        )
        y += row
    if len(shown) < len(inside):
        out.append(
            f"<text x=8 y={y + 10} font-size=10 fill=#555>{len(inside) - len(shown)} more "
            "complete streams in this window not drawn</text>"
        )
        y += 14
    # the pods' signals as dashed lines across the streams, each labelled under them: the
    # events one pixel column apart share a label ("sigkill, exited v1-3 +0.00 s")
    marked = [e for e in events if e.kind in MARKED_EVENTS and lo <= e.t - t0 <= hi]
    labels: list[tuple[float, list[Event]]] = []
    for e in marked:
        est = " (estimated)" if e.detail.get("estimated") else ""
        out.append(
            f"<line class=mark x1={x(e.t - t0)} x2={x(e.t - t0)} y1=8 y2={y} "
            f"stroke={MARKED_EVENTS[e.kind]} stroke-dasharray='3 3'><title>{e.kind}{est} "
            f"{_e(e.pod)} {e.t - t0:+.2f} s</title></line>"
        )
        if labels and x(e.t - t0) - labels[-1][0] < 4:
            labels[-1][1].append(e)
        else:
            labels.append((x(e.t - t0), [e]))
    for i, (px, group) in enumerate(labels):
        kinds = ", ".join(dict.fromkeys(e.kind for e in group))
        pods = ", ".join(dict.fromkeys(_short_pod(e.pod) for e in group if e.pod))
        text = _label(f"{kinds} {pods} {group[0].t - t0:+.2f} s".replace("  ", " "))
        out.append(
            f"<text class=mark {_beside(px, text)} y={y + 10 + 10 * (i % 4)} font-size=9 "
            f"fill=#555>{_e(text)}</text>"
        )
    if labels:
        y += 10 * min(4, len(labels)) + 4
    return _finish_svg("zoom", out, events, x, lo, hi, t0, y + 6)


LABEL_CHAR_PX = 6.0  # a 9 px system-ui character, a little above its average width
LABEL_MAX = 90  # characters: a label always fits on one side of its line


def _beside(px: float, text: str) -> str:
    """Where a vertical line's label goes: right of the line, or left of it when it
    would run past the svg's right edge (a canary's grouped label once did), so that it
    is never cut off."""
    halo = "stroke=#fff stroke-width=3 paint-order=stroke"  # readable over the bars
    if px + 3 + len(text) * LABEL_CHAR_PX > W - 2:
        return f"x={px - 3} text-anchor=end {halo}"
    return f"x={px + 3} {halo}"


def _label(text: str) -> str:
    return text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…"


def _short_pod(pod: str) -> str:
    """A pod's name short enough for a label: its last 14 characters."""
    return pod if len(pod) <= 16 else "…" + pod[-14:]


_TAG = re.compile(r"<[a-z][^<>]*>")
_UNQUOTED = re.compile(r"""=([^\s'"<>]+?)(?=[\s>]|/>)""")


def _quote_attributes(markup: str) -> str:
    """Quote bare attribute values: in `fill=#fff/>` the slash would join the value,
    the element would not close, and everything after it would not be drawn."""
    return _TAG.sub(lambda m: _UNQUOTED.sub(r'="\1"', m.group(0)), markup)


def _sample(records: list[StreamRecord]) -> list[StreamRecord]:
    """Every broken stream, and complete ones thinned beyond MAX_POINTS."""
    broken = [r for r in records if r.outcome != "complete"]
    ok = [r for r in records if r.outcome == "complete"]
    room = max(0, MAX_POINTS - len(broken))
    if len(ok) > room:
        step = len(ok) / room if room else len(ok) + 1
        ok = [ok[int(i * step)] for i in range(room)]
    return ok + broken  # broken drawn last, on top


def _rollout_table(summary: dict) -> str:
    checks = {c["name"]: c for c in summary.get("checks", [])}
    dur = checks.get("rollout_duration")
    cap = next((c for n, c in checks.items() if n.startswith("capacity_floor")), None)
    if not dur and not cap:
        return ""
    rows = ""
    if dur:
        rows += f"<tr><td>duration</td><td>{_e(dur['observed'])}</td><td>{_e(dur['expected'])}</td></tr>"
    if cap:
        rows += (
            f"<tr><td>lowest available replicas</td><td>{_e(cap['observed'])}</td>"
            f"<td>{_e(cap['expected'])}</td></tr>"
        )
    return (
        "<h2>Rollout against the plan</h2><table><tr><th></th><th>measured</th>"
        f"<th>planner</th></tr>{rows}</table>"
    )


def _broken_table(
    records: list[StreamRecord], events: list[Event], t0: float, victims: list[str]
) -> str:
    from harness.timeline import breaking_event
    from harness.verdict import describe_break

    broken = [r for r in records if r.outcome != "complete"]
    if not broken:
        return "<p>Every stream completed.</p>"
    rows = []
    for r in sorted(broken, key=lambda r: r.sent_at):
        ev = breaking_event(r, events, victims)  # the kube target estimates SIGTERM
        cause = describe_break(r, ev, t0) if ev is not None else ""
        err = "; ".join(r.gateway.errors if r.gateway else []) or (r.error or "")
        rows.append(
            f"<tr><td><code>{_e(r.request_id)}</code></td><td>{_e(r.pod)}</td><td>{_e(r.version)}</td>"
            f"<td class=num>{r.sent_at - t0:+.2f}</td><td class=num>{r.ended_at - t0:+.2f}</td>"
            f"<td style='color:{COLORS.get(r.outcome, '#000')}'>{_e(r.outcome)}</td>"
            f"<td class=num>{r.tokens}</td><td>{_e(r.gateway.status if r.gateway else None)}</td><td>{_e(cause)}</td>"
            f"<td>{_e(err[:160])}</td></tr>"
        )
    return (
        f"<p>{len(broken)} streams. <input id=filter placeholder='filter: request id, pod, outcome...'></p>"
        "<table id=broken><tr><th>request id</th><th>pod</th><th>version</th><th>start</th><th>end</th>"
        "<th>outcome</th><th>tokens</th><th>gateway</th><th>what broke it</th><th>error</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _latency_table(latency: dict) -> str:
    if any(isinstance(v, dict) and "n" in v for v in latency.values()):
        latency = {"all": latency}  # a probe's or a load's: one population, no phases
    rows = []
    for phase, metrics in latency.items():
        if not isinstance(metrics, dict):
            continue
        for name, p in metrics.items():
            rows.append(
                f"<tr><td>{_e(phase)}</td><td>{_e(name)}</td><td class=num>{p.get('n', 0)}</td>"
                + "".join(f"<td class=num>{_fmt(p.get(k))}</td>" for k in ("p50", "p90", "p99"))
                + "</tr>"
            )
    return (
        "<table><tr><th>phase</th><th>metric</th><th>n</th><th>p50</th><th>p90</th><th>p99</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _gateway_table(gw: dict | None) -> str:
    if not gw:
        return "<p class=muted>No gateway logs for this run.</p>"
    rows = "".join(
        f"<tr><td>HTTP {_e(k)}</td><td class=num>{_e(v)}</td></tr>"
        for k, v in gw.get("status", {}).items()
    )
    rows += (
        f"<tr><td>upstream prematurely closed</td>"
        f"<td class=num>{_e(gw.get('upstream_prematurely_closed', 0))}</td></tr>"
    )
    return f"<table>{rows}</table>"


def _loadgen(lg: dict | None) -> str:
    if not lg:
        return "<p class=muted>No load-generator data.</p>"
    lag = lg.get("loop_lag_p99_s")
    warn = (
        "<b style='color:#c62828'>Locust warned of high CPU: latency figures from a "
        "saturated generator are not to be trusted.</b>"
        if lg.get("cpu_warning")
        else "no CPU warning"
    )
    out = f"<p>{_e(lg.get('workers', 0))} worker(s); event-loop delay p99 {_fmt(lag)}; {warn}</p>"
    delay, limit = lg.get("delay") or {}, lg.get("delay_limit_s")
    if not delay:
        return out
    rows = ""
    for phase in ("before", "during", "after", "all"):
        s = delay.get(phase)
        if not s:
            continue
        over = limit is not None and phase != "all" and s["p99_s"] > limit
        cpu = s.get("cpu_max")
        rows += (
            f"<tr><td>{_e(phase)}</td><td class='num{' worse' if over else ''}'>"
            f"{s['p99_s'] * 1000:.1f} ms</td><td class=num>{s['max_s'] * 1000:.1f} ms</td>"
            f"<td class=num>{_delay_ms(s.get('loop_p99_s'))}</td>"
            f"<td class=num>{_delay_ms(s.get('arrival_p99_s'))}</td>"
            f"<td class=num>{'–' if cpu is None else f'{cpu:.0%}'}</td>"
            f"<td class=num>{_e(s['samples'])}</td></tr>"
        )
    said = (
        "The client's delay is the larger of its event loop's lateness and the time a "
        "piece of an answer waited in its socket before it was read (measured over "
        "plain http). "
        f"A figure the client measured can be late by its own delay: past "
        f"{limit * 1000:.0f} ms at p99 in a phase, a latency budget that holds or breaks "
        "within that delay is not judged (client_kept_up)."
        if limit is not None
        else ""
    )
    return (
        out
        + "<table><tr><th>phase</th><th>client delay p99</th><th>max</th>"
        + "<th>of it: event loop p99</th><th>socket to reading p99</th>"
        + "<th>worker CPU, highest second</th><th>timer samples</th></tr>"
        + rows
        + f"</table><p class=small>{_e(said)}</p>"
    )


def _delay_ms(value) -> str:
    """A delay measure's figure; a dash where it was not measured (a run from before
    it, or reads over TLS, which carry no receive time)."""
    return "–" if not isinstance(value, (int, float)) else f"{value * 1000:.1f} ms"


STATUS_MARK = {"pass": "✔", "fail": "✘", "inconclusive": "?", "skipped": "–"}


def check_text(value) -> str:
    """A check's observed or expected value as a reader reads it: a mapping as
    "before: 0 of 11; during: ...", a list joined, nothing as a dash (never a repr)."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {check_text(v)}" for k, v in value.items()) or "–"
    if isinstance(value, (list, tuple)):
        return ", ".join(check_text(v) for v in value) or "–"
    return str(value)


def _slo_text(slo: dict) -> str:
    """ "TTFT SLO 1.5 s, ITL SLO 0.2 s", an SLO not set saying so (never "None s")."""

    def one(name: str, value) -> str:
        return f"{name} SLO {value:g} s" if isinstance(value, (int, float)) else f"no {name} SLO"

    return f"{one('TTFT', slo.get('ttft_s'))}, {one('ITL', slo.get('itl_s'))}"


def _all_checks(summary: dict) -> str:
    rows = "".join(
        f"<tr><td>{STATUS_MARK.get(c.get('status'), '✔' if c['passed'] else '✘')}</td>"
        f"<td>{_e(c['name'])}</td><td>{_e(check_text(c['observed']))}</td>"
        f"<td>{_e(check_text(c['expected']))}</td>"
        f"<td>{_e(check_text(c.get('reason') or c.get('population')))}</td>"
        f"<td class=num>{len(c.get('requests') or [])}</td></tr>"
        for c in summary.get("checks", [])
    )
    return (
        "<table><tr><th></th><th>check</th><th>observed</th><th>expected</th>"
        f"<th>population judged</th><th>requests that broke it</th></tr>{rows}</table>"
    )


_FILTER_JS = """<script>
(function(){var f=document.getElementById('filter');if(!f)return;
f.addEventListener('input',function(){var q=f.value.toLowerCase();
document.querySelectorAll('#broken tr').forEach(function(tr,i){if(i===0)return;
tr.style.display=tr.textContent.toLowerCase().indexOf(q)<0?'none':'';});});})();
</script>"""


def _index_row(s: dict) -> str:
    s["scenario"] = str(s.get("scenario"))
    broken = sum(
        v for k, v in (s.get("outcomes") or {}).items() if k not in ("complete", "cancelled")
    )
    if not isinstance(broken, int):
        raise TypeError("outcomes are not counts")
    failed = (
        ", ".join(
            str(c["name"]) + (" (inconclusive)" if c.get("status") == "inconclusive" else "")
            for c in s.get("checks") or []
            if c.get("status", "pass" if c["passed"] else "fail") in ("fail", "inconclusive")
        )
        or s.get("reason")  # a skipped scenario: why the target could not run it
        or "–"
    )
    v = s["verdict"]
    name = _e(s.get("name") or s["_folder"])
    if s.get("_report", True):  # a run that ended before its report (skipped) has none
        name = f"<a href='{_href(s['_folder'], 'report.html')}'>{name}</a>"
    return (
        f"<tr><td>{_e(s['scenario'])}</td><td>{name}</td>"
        f"<td><span class='verdict {verdict_class(v)}'>{_e(v.upper())}</span></td>"
        f"<td class=num>{_e(goodput_text(s))}</td>"
        f"<td class=num>{_e(s.get('requests'))}</td><td class=num>{_e(broken)}</td><td>{_e(failed)}</td></tr>"
    )


def _night_section(session_dir: Path) -> str:
    """The night's plan (night.json, written with --fit-deadline): the deadline, what
    started, what was left for another night and why. Empty without one."""
    path = session_dir / "night.json"
    if not path.is_file():
        return ""
    try:
        night = json.loads(path.read_text())
        deadline, source = float(night["deadline_s"]), str(night["source"])
        started = [str(n) for n in night["started"]]
        left = [(str(x["name"]), float(x["worst_s"]), str(x["why"])) for x in night["left"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"<h2>The night's plan</h2><p>night.json could not be read ({_e(type(exc).__name__)})</p>"
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class=num>{_e(clock(worst))}</td><td>{_e(why)}</td></tr>"
        for name, worst, why in left
    )
    table = (
        "<table><tr><th>left for another night</th><th>worst case</th><th>why</th></tr>"
        f"{rows}</table>"
        if left
        else "<p>Nothing was left for another night.</p>"
    )
    return (
        f"<h2>The night's plan</h2><p>Deadline {_e(clock(deadline))} ({_e(source)}); "
        f"started in this order: {_e(', '.join(started) or 'none')}.</p>{table}"
    )


def write_index(session_dir: Path) -> Path | None:
    """index.html over every scenario run of a session: the pass/fail matrix and links."""
    session_dir = Path(session_dir)
    runs, unreadable = [], []
    for summary_path in sorted(session_dir.glob("*/summary.json")):
        try:
            s = read_summary(summary_path)
        except ReportInputError as exc:  # listed on the page, never the end of the session
            unreadable.append(str(exc))
            continue
        s["_folder"] = summary_path.parent.name
        s["_report"] = (summary_path.parent / "report.html").is_file()
        runs.append(s)
    night = _night_section(session_dir)
    if not runs and not unreadable and not night:
        return None
    rows = []
    for s in list(runs):
        try:
            rows.append(_index_row(s))
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            runs.remove(s)
            unreadable.append(
                f"{session_dir / s['_folder'] / 'summary.json'}: a value of a shape rollcheck "
                f"does not write ({type(exc).__name__}: {str(exc)[:80]})"
            )
    kinds = Counter((s["scenario"], s["verdict"]) for s in runs)
    matrix = "".join(
        f"<tr><td>{_e(k)}</td><td class=num>{kinds.get((k, 'pass'), 0)}</td>"
        f"<td class=num>{kinds.get((k, 'fail'), 0)}</td>"
        f"<td class=num>{kinds.get((k, 'inconclusive'), 0)}</td>"
        f"<td class=num>{kinds.get((k, 'skipped'), 0)}</td></tr>"
        for k in sorted({s["scenario"] for s in runs})
    )
    verdicts = {s["verdict"] for s in runs}
    overall = session_verdict(verdicts, bool(unreadable))
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>rollcheck session</title>"
        f"<style>{CSS}</style></head><body><h1>rollcheck session "
        f"<span class='verdict {verdict_class(overall)}'>{overall.upper()}</span></h1>"
        f"<p class=muted>{_e(session_dir.name)} · {len(runs)} scenario runs · "
        "<a href='../history.html'>the history of every night</a></p>"
        "<h2>Verdicts by scenario</h2><table><tr><th>scenario</th><th>pass</th><th>fail</th>"
        f"<th>inconclusive</th><th>skipped</th></tr>{matrix}</table><h2>Runs</h2><table><tr><th>scenario</th>"
        "<th>run</th><th>verdict</th><th>goodput</th>"
        f"<th>requests</th><th>broken</th><th>failed checks</th></tr>{''.join(rows)}</table>{night}{passed_over(unreadable)}</body></html>"
    )
    path = session_dir / "index.html"
    write_atomic(path, page)
    write_atomic(
        session_dir / "index.json",
        json.dumps(
            [
                {k: s.get(k) for k in ("scenario", "name", "verdict", "requests", "outcomes")}
                | {"goodput": (s.get("goodput") or {}).get("all")}
                | {"folder": s["_folder"]}
                for s in runs
            ],
            indent=2,
        ),
    )
    return path
