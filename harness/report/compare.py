"""Pages over several sessions: two sessions side by side (did the new engine version
behave at least as well as the old one under the same disruptions?) and the history of
the nightly's sessions (verdict per scenario per night, goodput trend, first failing night).

Each page is one self-contained file, deterministic, drawn without scripts. A session is
a folder written by one pytest run (reports/<time>-<target>/<run>/summary.json).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harness.files import BadInput, read_lines, write_atomic
from harness.report.html import (
    CSS,
    ReportInputError,
    _e,
    _href,
    goodput_text,
    passed_over,
    read_summary,
    verdict_class,
)
from harness.significance import (
    ALPHA,
    GOODPUT_TOLERANCE,
    LATENCY_TOLERANCE,
    MIN_SAMPLE,
    goodput_test,
    latency_change,
)
from harness.verdict import PHASES, VERDICT_RANK

# per-request latencies, from each run's records.jsonl (complete streams); end-to-end time
# per output token, not per request: a request's time is mostly its answer's length
LATENCY = (
    ("ttft_s", "TTFT"),
    ("itl_max_s", "longest ITL"),
    ("per_token_s", "end to end per output token"),
)
COMPARE_CSS = """
.worse{background:#ffebee;color:#b71c1c;font-weight:600}
.better{background:#e8f5e9;color:#1b5e20;font-weight:600}
td.sep{border-left:2px solid #ddd} .small{font-size:12px}
svg.spark{background:none;border:none;vertical-align:middle}
"""


@dataclass
class Session:
    folder: Path
    runs: dict[str, dict]  # run name (the pytest test name) -> summary.json
    unreadable: list[str] = field(default_factory=list)  # one line per summary passed over

    @property
    def name(self) -> str:
        return self.folder.name


def load_session(folder: Path, strict: bool = True) -> Session:
    """strict: an unreadable summary is an error; otherwise (the history of many nights)
    it is passed over and named in Session.unreadable."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportInputError(
            f"{folder} is not a folder; give a session folder (reports/<time>-<target>)"
        )
    runs: dict[str, dict] = {}
    unreadable: list[str] = []
    for path in sorted(folder.glob("*/summary.json")):
        try:
            s = read_summary(path)
        except ReportInputError as exc:
            if strict:
                raise
            unreadable.append(str(exc))
            continue
        s["_folder"] = path.parent
        runs[s.get("name") or path.parent.name] = s
    if not runs and not unreadable:
        raise ReportInputError(
            f"{folder} is not a rollcheck session: no <run>/summary.json in it; give a folder "
            "one pytest run wrote (reports/<time>-<target>)"
        )
    return Session(folder, runs, unreadable)


# --- comparing two sessions -----------------------------------------------------------


def broken(s: dict) -> int:
    return sum(
        v for k, v in (s.get("outcomes") or {}).items() if k not in ("complete", "cancelled")
    )


def share(s: dict, phase: str = "all") -> float | None:
    g = (s.get("goodput") or {}).get(phase)
    value = g.get("share") if isinstance(g, dict) else None
    return value if _number(value) else None


def good_of(s: dict, phase: str = "all") -> tuple[int, int] | None:
    """(good, requests) of a run's goodput in the phase, when the summary has both."""
    g = (s.get("goodput") or {}).get(phase) or {}
    good, n = g.get("good"), g.get("requests")
    if not (_number(good) and _number(n)) or not 0 <= good <= n:
        return None
    return int(good), int(n)


def samples(run: dict) -> dict[str, list[float]]:
    """Per latency metric, one value of each complete stream of a run, from its
    records.jsonl (read once for all the metrics)."""
    import json

    path = Path(run["_folder"]) / "records.jsonl"
    out: dict[str, list[float]] = {metric: [] for metric, _ in LATENCY}
    if not path.exists():
        return out
    try:
        for n, line in read_lines(path):
            try:
                r = json.loads(line)
            except ValueError:
                raise ReportInputError(
                    f"{path}:{n} is not a JSON record; rerun the scenario, or compare without it"
                ) from None
            if not isinstance(r, dict) or r.get("outcome") != "complete":
                continue
            tokens, took = r.get("tokens"), r.get("duration_s")
            per_token = took / tokens if _number(took) and _number(tokens) and tokens > 0 else None
            for metric, values in out.items():
                value = per_token if metric == "per_token_s" else r.get(metric)
                if _number(value):
                    values.append(float(value))
    except BadInput as exc:
        raise ReportInputError(f"{exc}; compare without that run") from None
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def client_delay_of(run: dict) -> float | None:
    """A run's client delay p99 over the whole run (its summary's load_generator), or
    None for a run recorded before rollcheck measured it."""
    lg = run.get("load_generator")
    delay = lg.get("delay") if isinstance(lg, dict) else None
    whole = delay.get("all") if isinstance(delay, dict) else None
    p99 = whole.get("p99_s") if isinstance(whole, dict) else None
    return float(p99) if _number(p99) else None


def goodput_change(base: dict, cand: dict, phase: str) -> tuple[str, str]:
    """('worse' | 'better' | '', what the test said) for two runs' goodput in a phase."""
    b, c = share(base, phase), share(cand, phase)
    if b is None or c is None:
        return "", ""
    if abs(c - b) < GOODPUT_TOLERANCE:
        return "", f"a change under {GOODPUT_TOLERANCE * 100:g} percentage point"
    nb, nc = good_of(base, phase), good_of(cand, phase)
    if nb is None or nc is None:
        return "", "cannot tell: the summaries do not say how many requests were good"
    return goodput_test(nb, nc)


def change(kind: str, base, cand) -> str:
    """'worse', 'better' or '' for one figure; `kind` says which direction is good."""
    if base is None or cand is None:
        return ""
    if kind == "verdict":
        d = VERDICT_RANK.get(cand, 3) - VERDICT_RANK.get(base, 3)
    else:  # counts of broken streams: fewer is better
        d = cand - base
    return "worse" if d > 0 else "better" if d < 0 else ""


def compare_runs(base: dict, cand: dict) -> dict:
    """Every figure of one scenario in both sessions, and what changed: rows of (figure,
    baseline, candidate, 'worse' | 'better' | '', how it was told)."""
    rows = [
        (
            "verdict",
            base["verdict"],
            cand["verdict"],
            change("verdict", base["verdict"], cand["verdict"]),
            "",
        ),
        (
            "broken streams",
            broken(base),
            broken(cand),
            change("count", broken(base), broken(cand)),
            "",
        ),
    ]
    for p in ("all", *PHASES):
        b, c = share(base, p), share(cand, p)
        if b is not None or c is not None:
            rows.append((f"goodput {p}", b, c, *goodput_change(base, cand, p)))
    base_samples, cand_samples = samples(base), samples(cand)
    for metric, label in LATENCY:
        b, c = base_samples[metric], cand_samples[metric]
        if not b and not c:
            continue
        ch, said = latency_change(b, c, (client_delay_of(base), client_delay_of(cand)))
        median = lambda v: statistics.median(v) if v else None  # noqa: E731
        rows.append((f"{label}, median", median(b), median(c), ch, said))
    changes = [r[3] for r in rows]
    status = "regressed" if "worse" in changes else "improved" if "better" in changes else "same"
    return {"rows": rows, "status": status}


def compare_sessions(base: Session, cand: Session) -> dict:
    common = [n for n in base.runs if n in cand.runs]
    if not common:
        raise ReportInputError(
            f"{base.folder} and {cand.folder} have no scenario run in common; compare two "
            "sessions that ran the same scenarios (the same -k and --set)"
        )
    return {
        "common": {n: compare_runs(base.runs[n], cand.runs[n]) for n in common},
        "only_baseline": [n for n in base.runs if n not in cand.runs],
        "only_candidate": [n for n in cand.runs if n not in base.runs],
    }


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v.upper()
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _page_href(page: Path, target: Path) -> str:
    """The link from one page to another file, relative, each part quoted."""
    rel = os.path.relpath(Path(target), Path(page).parent)
    return _href(*rel.split(os.sep))


def _night_link(page: Path, session: Session) -> str:
    """A night's heading, linked to its session page when that page is there."""
    index = session.folder / "index.html"
    label = _e(night_label(session.name))
    if not index.is_file():
        return label
    return f"<a href='{_e(_page_href(page, index))}'>{label}</a>"


def _link(page: Path, run: dict, text: str) -> str:
    report = Path(run["_folder"]) / "report.html"
    if not report.is_file():  # a run that ended before its report (skipped): no link
        return _e(text)
    return f"<a href='{_e(_page_href(page, report))}'>{_e(text)}</a>"


def _verdict(v: str) -> str:
    return f"<span class='verdict {verdict_class(v)}'>{_e(v.upper())}</span>"


def render_compare(base: Session, cand: Session, page: Path) -> tuple[str, dict]:
    result = compare_sessions(base, cand)
    counts = {"regressed": 0, "improved": 0, "same": 0}
    overview, details = [], []
    for name, c in result["common"].items():
        counts[c["status"]] += 1
        b, k = base.runs[name], cand.runs[name]
        cls = {"regressed": "worse", "improved": "better"}.get(c["status"], "")
        overview.append(
            f"<tr><td><a href='#{_e(name)}'>{_e(name)}</a></td><td>{_verdict(b['verdict'])}</td>"
            f"<td>{_verdict(k['verdict'])}</td><td class=num>{_e(goodput_text(b))}</td>"
            f"<td class=num>{_e(goodput_text(k))}</td><td class=num>{broken(b)}</td>"
            f"<td class=num>{broken(k)}</td><td class='{cls}'>{c['status']}</td></tr>"
        )
        rows = "".join(
            f"<tr><td>{_e(label)}</td><td class=num>{_e(_fmt(bv))}</td>"
            f"<td class='num {ch}'>{_e(_fmt(cv))}</td><td class='{ch}'>{ch}</td>"
            f"<td class=small>{_e(said)}</td></tr>"
            for label, bv, cv, ch, said in c["rows"]
        )
        details.append(
            f"<h2 id='{_e(name)}'>{_e(name)} <span class='small {cls}'>{c['status']}</span></h2>"
            f"<p class=small>{_link(page, b, 'baseline report')} · {_link(page, k, 'candidate report')}"
            "</p><table><tr><th></th><th>baseline</th><th>candidate</th><th>change</th>"
            "<th>how it was told</th></tr>"
            f"{rows}</table>"
        )
    only = ""
    for label, key, session in (
        ("Only in the baseline", "only_baseline", base),
        ("Only in the candidate", "only_candidate", cand),
    ):
        if result[key]:
            items = "".join(
                f"<li>{_link(page, session.runs[n], n)} ({_e(session.runs[n]['verdict'].upper())})</li>"
                for n in result[key]
            )
            only += f"<h2>{label}</h2><ul>{items}</ul>"
    overall = "regressed" if counts["regressed"] else "no regression"
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>rollcheck compare: {_e(overall)}</title><style>{CSS}{COMPARE_CSS}</style></head><body>"
        f"<h1>rollcheck: {_e(base.name)} → {_e(cand.name)}</h1>"
        f"<p class=muted>baseline {_e(base.folder)} · candidate {_e(cand.folder)} · "
        f"{len(result['common'])} scenario runs in both: {counts['regressed']} regressed, "
        f"{counts['improved']} improved, {counts['same']} the same. A goodput change is marked "
        f"only when a two-sided Fisher exact test on the two runs' good and not-good requests "
        f"says so at {ALPHA:g} and the share moved by {GOODPUT_TOLERANCE:.0%} or more; a "
        "latency change only when a "
        f"two-sided Mann-Whitney U test on the two runs' per-request values (complete streams, "
        f"at least {MIN_SAMPLE} each) says so at {ALPHA:g} and the median moved by "
        f"{LATENCY_TOLERANCE:.0%} or more.</p>"
        "<table><tr><th>scenario run</th><th>baseline</th><th>candidate</th><th>goodput before</th>"
        "<th>goodput after</th><th>broken before</th><th>broken after</th><th>change</th></tr>"
        + "".join(overview)
        + "</table>"
        + only
        + "".join(details)
        + "</body></html>"
    )
    return html, result | {"counts": counts}


def write_compare(baseline: Path, candidate: Path, out: Path | None = None) -> tuple[Path, dict]:
    base, cand = load_session(baseline), load_session(candidate)
    page = Path(out) if out else cand.folder / "compare.html"
    html, result = render_compare(base, cand, page)
    write_atomic(page, html)
    return page, result


# --- history over the nightly's sessions --------------------------------------------


def load_history(reports_dir: Path) -> list[Session]:
    reports_dir = Path(reports_dir)
    if not reports_dir.is_dir():
        raise ReportInputError(
            f"{reports_dir} is not a folder; give the reports folder the nightly keeps"
        )
    sessions = []
    for folder in sorted(p for p in reports_dir.iterdir() if p.is_dir()):
        if any(folder.glob("*/summary.json")):
            sessions.append(load_session(folder, strict=False))
    if not sessions:
        raise ReportInputError(
            f"{reports_dir} holds no rollcheck sessions (folders of <run>/summary.json); give "
            "the folder passed to --reports-dir"
        )
    return sessions


def first_failing(verdicts: list[str | None]) -> int | None:
    """The index of the first night of the current run of non-passing nights, if the
    latest night did not pass (nights the scenario did not run are passed over)."""
    ran = [(i, v) for i, v in enumerate(verdicts) if v is not None]
    if not ran or ran[-1][1] == "pass":
        return None
    first = ran[-1][0]
    for i, v in reversed(ran):
        if v == "pass":
            break
        first = i
    return first


def _spark(values: list[float | None], w: int = 120, h: int = 24) -> str:
    """Goodput per night, from the lowest night (or 90 %, if lower) at the bottom to 100 %."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if not pts:
        return "–"
    n = max(1, len(values) - 1)
    floor = min([0.9] + [v for _, v in pts])
    span = max(1.0 - floor, 1e-9)

    def xy(i: int, v: float) -> str:
        return f"{2 + i * (w - 4) / n:.1f},{h - 2 - (v - floor) / span * (h - 4):.1f}"

    coords = " ".join(xy(i, v) for i, v in pts)
    dots = "".join(
        "<circle cx='{}' cy='{}' r='1.8' fill='#1565c0'><title>{:.1%}</title></circle>".format(
            *xy(i, v).split(","), v
        )
        for i, v in pts
    )
    return (
        f"<svg class=spark xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}'>"
        f"<polyline fill='none' stroke='#1565c0' points='{coords}'/>{dots}</svg>"
    )


def _nights(n: int) -> str:
    return f"{n} night" if n == 1 else f"{n} nights"


def night_label(folder_name: str) -> str:
    """'20261130-020001-kube' -> '2026-11-30 02:00'; other names as they are."""
    stamp = folder_name[:15]
    if len(stamp) == 15 and stamp[:8].isdigit() and stamp[8] == "-" and stamp[9:].isdigit():
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
    return folder_name


def render_history(
    sessions: list[Session], page: Path, compare: tuple[Path, str, str] | None = None
) -> tuple[str, dict]:
    names = sorted({n for s in sessions for n in s.runs})
    head = "".join(f"<th class=small>{_night_link(page, s)}</th>" for s in sessions)
    rows, table = [], {}
    for name in names:
        verdicts = [s.runs[name]["verdict"] if name in s.runs else None for s in sessions]
        shares = [share(s.runs[name]) if name in s.runs else None for s in sessions]
        first = first_failing(verdicts)
        table[name] = {"verdicts": verdicts, "goodput": shares, "first_failing": first}
        cells = ""
        for s in sessions:
            run = s.runs.get(name)
            if run is None:
                cells += "<td class=muted>not run</td>"
                continue
            g = share(run)
            cells += (
                f"<td><span class='small {verdict_class(run['verdict'])}' "
                "style='display:inline-block;width:8px;height:8px;border-radius:4px'></span> "
                f"{_link(page, run, run['verdict'].upper())}"
                f"<div class=small>{'–' if g is None else f'{g:.1%}'}</div></td>"
            )
        since = (
            f"<span class=worse>since {_e(night_label(sessions[first].name))} "
            f"({_nights(sum(v is not None for v in verdicts[first:]))})</span>"
            if first is not None
            else "–"
        )
        rows.append(f"<tr><td>{_e(name)}</td>{cells}<td>{_spark(shares)}</td><td>{since}</td></tr>")
    failing = sum(1 for t in table.values() if t["first_failing"] is not None)
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>rollcheck history</title>"
        f"<style>{CSS}{COMPARE_CSS}</style></head><body><h1>rollcheck history</h1>"
        f"<p class=muted>{len(sessions)} sessions from {_e(night_label(sessions[0].name))} to "
        f"{_e(night_label(sessions[-1].name))} · {len(names)} scenario runs · {failing} not "
        "passing on the latest night they ran. Each cell: the verdict (linked to its report) "
        "and goodput; each night's heading links to its session page.</p>"
        + (
            f"<p><a href='{_e(_page_href(page, compare[0]))}'>The last two nights compared</a>"
            f" ({_e(night_label(compare[1]))} and {_e(night_label(compare[2]))}): per "
            "scenario, both verdicts and figures side by side.</p>"
            if compare
            else ""
        )
        + f"<table><tr><th>scenario run</th>{head}<th>goodput trend</th><th>failing</th></tr>"
        + "".join(rows)
        + "</table>"
        + passed_over([line for s in sessions for line in s.unreadable])
        + "</body></html>"
    )
    return html, table


def write_history(reports_dir: Path, out: Path | None = None) -> tuple[Path, dict]:
    """history.html over every session; with two or more, the last two nights compared
    (compare-latest.html beside it, in the candidate's session folder's terms) and linked."""
    sessions = load_history(reports_dir)
    page = Path(out) if out else Path(reports_dir) / "history.html"
    compare = None
    if len(sessions) >= 2:
        base, cand = sessions[-2], sessions[-1]
        if set(base.runs) & set(cand.runs):  # the same scenario on both nights
            target = page.parent / "compare-latest.html"
            try:
                html, _ = render_compare(
                    load_session(base.folder), load_session(cand.folder), target
                )
                write_atomic(target, html)
                compare = (target, base.name, cand.name)
            except ReportInputError:
                compare = None  # a night the comparison cannot read: no link, the history still
    html, table = render_history(sessions, page, compare)
    write_atomic(page, html)
    return page, table
