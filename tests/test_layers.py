"""The layers the design states, held by their imports (as Kubernetes holds its own with
import restrictions): each case imports one module in a fresh interpreter and lists the
modules that must not have been loaded with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

# every target: what a pod spec says (harness.cluster.podspec) is pure and not one
TARGETS = [
    "harness.cluster.target",
    "harness.cluster.local",
    "harness.cluster.kube",
    "harness.cluster.kubelocal",
]

CONTRACTS = [
    # the independent judge: the simulator loads nothing of the stream judge
    ("harness.sim.app", ["harness.streams", "harness.checks", "harness.verdict"]),
    # the verdict layer and its checks are pure: no targets, load, reports, simulator, HTTP
    (
        "harness.checks",
        [*TARGETS, "harness.load", "harness.report", "harness.sim", "httpx", "kubernetes"],
    ),
    # what a pod spec says is pure: lint, the checks and the Kubernetes target share it
    ("harness.cluster.podspec", ["harness.cluster.target", "harness.lint", "kubernetes"]),
    ("harness.lint", ["harness.cluster.target", "harness.cluster.kube", "kubernetes", "httpx"]),
    (
        "harness.verdict",
        [*TARGETS, "harness.load", "harness.report", "harness.sim", "httpx"],
    ),
    # the stream judge is the functional core: no I/O libraries
    ("harness.streams", ["harness.cluster", "harness.sim", "httpx", "harness.load"]),
    # reports render from the run folder: no scenario, target, load or HTTP client
    (
        "harness.report.html",
        ["harness.scenario", *TARGETS, "harness.load", "harness.sim", "httpx"],
    ),
    ("harness.report.compare", ["harness.scenario", *TARGETS, "harness.load", "httpx"]),
    ("harness.timeline", [*TARGETS, "harness.load", "httpx"]),
    # the Kubernetes target does not lean on the local target's internals
    ("harness.cluster.kube", ["harness.cluster.local.controller", "harness.cluster.kubelocal"]),
]


def loaded_with(module: str) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("module, forbidden", CONTRACTS, ids=[c[0] for c in CONTRACTS])
def test_import_contract(module, forbidden):
    loaded = loaded_with(module)
    broken = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert not broken, f"{module} loads {broken}"


# exceptions that are control flow, not user errors
NOT_USER_ERRORS = {
    "harness.scenario.ScenarioFailed",  # a verdict, reported by the plugin
    "harness.scenario.DryRun",
    "harness.scenario.ScenarioSkipped",
    "harness.signals.Terminated",  # SIGTERM, unwound like Ctrl-C
    "harness.sim.app.BadRequest",  # the simulator's own 400s, on the wire
    "harness.streams.sse.EventTooLarge",  # judged: the stream is not_sse, never raised out
}


def test_one_error_tree():
    """Every error rollcheck raises for a user derives from RollcheckError: main and the
    plugin print it as one line."""
    import importlib
    import inspect
    import pkgutil

    import harness
    from harness.errors import RollcheckError

    outside = []
    for mod in pkgutil.walk_packages(harness.__path__, "harness."):
        if mod.name == "harness.engines.build_model":  # runs in the engine's own Python
            continue
        m = importlib.import_module(mod.name)
        for name, cls in inspect.getmembers(m, inspect.isclass):
            where = f"{mod.name}.{name}"
            if cls.__module__ != mod.name or not issubclass(cls, BaseException):
                continue
            if where not in NOT_USER_ERRORS and not issubclass(cls, RollcheckError):
                outside.append(where)
    assert not outside, f"errors outside the tree: {outside}"


def test_init_files_only_re_export():
    """A package's __init__.py names what its modules hold and holds nothing itself: code
    lives in a module named for it, where the next engineer looks for it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    holding = []
    for init in sorted((root / "harness").rglob("__init__.py")):
        for node in ast.parse(init.read_text()).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            dunder = isinstance(node, ast.Assign) and [
                getattr(t, "id", None) for t in node.targets
            ] in (["__all__"], ["__version__"])
            if not (docstring or dunder or isinstance(node, (ast.Import, ast.ImportFrom))):
                holding.append(f"{init.relative_to(root)}:{node.lineno}")
    assert not holding, f"__init__.py holding code, not re-exporting: {holding}"
