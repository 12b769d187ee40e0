"""lint itself: each inference Deployment (found by engine image or command) read once into
a `Deployment` and given to every selected rule."""

from __future__ import annotations

from harness.lint.manifests import Index, LintInputError, Manifest, validate
from harness.lint.rules import RULES, Deployment, Finding, LintOptions, engine_container

# a field of a type Kubernetes does not accept, met by a rule that reads it
_TYPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError)


def select_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> set[str]:
    """The ids of the rules to run: those selected (all by default) but not ignored. An id
    (or prefix, as RC01) that names no rule is an error."""
    ids = [r.id for r in RULES]

    def matching(given: list[str]) -> set[str]:
        out = set()
        for g in given:
            found = {i for i in ids if i.startswith(g.strip().upper())}
            if not g.strip() or not found:
                raise LintInputError(
                    f"no lint rule {g!r}: the rules are {ids[0]}..{max(ids)} "
                    "(rollcheck lint --rules lists them)"
                )
            out |= found
        return out

    chosen = matching(select) if select else set(ids)
    return chosen - (matching(ignore) if ignore else set())


def lint(
    manifests: list[Manifest], opts: LintOptions | None = None, rules: set[str] | None = None
) -> list[Finding]:
    """Every finding of the rules (all, or the ids in `rules`) on the inference Deployments."""
    opts = opts or LintOptions()
    findings: list[Finding] = []
    try:
        index = Index(manifests)  # each Deployment's neighbours, found once
    except _TYPE_ERRORS as exc:
        raise LintInputError(
            f"a PDB, Service, autoscaler or Ingress with a field of a type Kubernetes does not "
            f"accept ({type(exc).__name__}: {str(exc)[:80]})"
        ) from None
    for m in (m for m in manifests if m.kind == "Deployment"):
        try:
            validate(m)
            found = engine_container(m, opts)
            if found is None:
                continue
            d = Deployment.read(m, *found, index, opts)
            for r in RULES:
                if rules is None or r.id in rules:
                    findings += r.check(d)
        except _TYPE_ERRORS as exc:
            if isinstance(exc, LintInputError):
                raise
            raise LintInputError(
                f"{m.file}: document {m.doc} ({m.ref}) or an object beside it: a field of a "
                f"type Kubernetes does not accept ({type(exc).__name__}: {str(exc)[:80]})"
            ) from None
    return findings
