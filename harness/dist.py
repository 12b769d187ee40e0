"""What rollcheck needs installed to run: the closure of its declared dependencies.

The runner image (kube-local's copy of the Dockerfile's image) copies these, and
scripts/lock pins them in constraints.txt, which the Dockerfile and `bash scripts/run`
install with.
"""

from __future__ import annotations

from harness.errors import RollcheckError


class DistError(RollcheckError):
    """A dependency is not installed: one line."""


def closure() -> list:
    """The installed distributions rollcheck needs at run time (no extras of its own; a
    dependency's extras, as uvicorn[standard], followed), itself first."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    extras_of: dict[str, set[str]] = {}
    todo: list[tuple[str, frozenset[str]]] = [("rollcheck", frozenset())]
    while todo:
        raw, extras = todo.pop()
        name = raw.lower().replace("_", "-")
        if name in seen and extras <= extras_of[name]:
            continue
        try:
            dist = seen.get(name) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise DistError(f"rollcheck needs {name!r}, which is not installed") from None
        seen[name] = dist
        extras_of[name] = extras_of.get(name, set()) | extras
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = [""] + sorted(extras_of[name])
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
                todo.append((req.name, frozenset(req.extras)))
    return list(seen.values())
