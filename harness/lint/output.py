"""lint's findings as text, as GitHub annotations, as the rule table, and as an exit code."""

from __future__ import annotations

from harness.lint.rules import RULES, SEVERITIES, Finding


def format_rules() -> str:
    """The rule table `rollcheck lint --rules` prints: id, severity, what it checks."""
    width = max(len(s) for s in SEVERITIES)
    return "\n".join(
        f"{r.id}  {r.severity:<{width}}  {r.summary}" for r in sorted(RULES, key=lambda r: r.id)
    )


def format_text(findings: list[Finding]) -> str:
    if not findings:
        return "no findings"
    lines = []
    for f in findings:
        lines.append(f"{f.file}:{f.line}: {f.severity} {f.rule} {f.object} {f.path}")
        lines.append(f"    why: {f.why}")
        lines.append(f"    fix: {f.fix}")
    return "\n".join(lines)


def format_github(findings: list[Finding]) -> str:
    level = {"error": "error", "warning": "warning", "info": "notice"}
    return "\n".join(
        f"::{level[f.severity]} file={f.file},line={f.line},title={f.rule} {f.object}::"
        f"{f.path}: {f.why}. Fix: {f.fix}"
        for f in findings
    )


def exit_code(findings: list[Finding], fail_on: str = "error") -> int:
    threshold = SEVERITIES.index(fail_on)
    return 1 if any(SEVERITIES.index(f.severity) >= threshold for f in findings) else 0
