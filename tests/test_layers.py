"""The layers the design states, held by their imports (as Kubernetes holds its own with
import restrictions): each case imports one module in a fresh interpreter and lists the
modules that must not have been loaded with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

# every target (what a pod spec says, harness.podspec, lies below them all)
TARGETS = [
    "harness.cluster.target",
    "harness.cluster.local",
    "harness.cluster.kube",
    "harness.cluster.kubelocal",
]

CONTRACTS = [
    # the config reads every section, the load's too, and reaches up into nothing that
    # runs a load or a target
    ("harness.config.schema", ["loadgen", "harness.load", "harness.cluster", "locust", "httpx"]),
    # the independent judge: the simulator loads nothing of the stream judge
    ("harness.sim.app", ["harness.streams", "harness.checks", "harness.verdict"]),
    # the verdict layer and its checks are pure: nothing of cluster/ (the targets sit
    # above them), load, reports, simulator, HTTP
    (
        "harness.checks",
        ["harness.cluster", "harness.load", "harness.report", "harness.sim", "httpx", "kubernetes"],
    ),
    # what a pod spec says is pure, below the targets: lint, the checks and the
    # Kubernetes target share it
    ("harness.podspec", ["harness.cluster", "harness.lint", "kubernetes"]),
    ("harness.lint", ["harness.cluster", "kubernetes", "httpx"]),
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
    # the Kubernetes target does not lean on the local target's internals, nor reach back
    # up to what is built over it (dry run, the scenario)
    (
        "harness.cluster.kube",
        [
            "harness.cluster.local.controller",
            "harness.cluster.kubelocal",
            "harness.dryrun",
            "harness.scenario",
        ],
    ),
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


def static_imports() -> dict[str, set[str]]:
    """Each harness module -> the harness modules it names in an import, at the top or
    inside a function (a function-local import loads nothing until called, so the
    contract above cannot see it)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = {}
    for path in (root / "harness").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                subs = {f"{base}.{a.name}" for a in node.names} & set(files)
                named |= subs or {base}  # `from harness import lint` names harness.lint
        graph[name] = {m for m in named if m in files and m != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str, package: bool = True) -> set[str]:
    """What `start` imports, directly or through others (package: and its submodules)."""
    inside = [m for m in graph if package and m.startswith(start + ".")]
    seen, todo = set(), [start, *inside]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


@pytest.mark.parametrize("module, forbidden", CONTRACTS, ids=[c[0] for c in CONTRACTS])
def test_import_contract_counting_function_local_imports(module, forbidden):
    graph = static_imports()
    broken = sorted(
        m
        for m in reachable(graph, module)
        if any(m == f or m.startswith(f + ".") for f in forbidden)
    )
    assert not broken, f"{module} imports (at the top or in a function) {broken}"


def test_no_import_circle():
    """No two modules import each other, directly or through others, even inside a
    function: each part of the code can be read without the ones above it."""
    graph = static_imports()
    reach = {m: reachable(graph, m, package=False) for m in graph}
    circles = sorted(
        {
            tuple(sorted(m for m in reach[start] if start in reach[m]))
            for start in graph
            if any(start in reach[n] for n in graph[start])
        }
    )
    assert not circles, f"import circles: {circles}"


# exceptions that are control flow, not user errors
NOT_USER_ERRORS = {
    "harness.scenario.ScenarioFailed",  # a verdict, reported by the plugin
    "harness.scenario.DryRun",
    "harness.preconditions.ScenarioSkipped",
    "harness.signals.Terminated",  # SIGTERM, unwound like Ctrl-C
    "harness.sim.app.BadRequest",  # the simulator's own 400s, on the wire
    "harness.sim.adapters.AdapterError",  # the simulator's adapter refusals, on the wire
    "harness.sim.pd.PrefillFailed",  # the simulated sidecar's failed prefill, on the wire
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


def test_the_checks_module_says_what_it_offers_before_anything_else():
    """harness/checks.py opens with __all__, and it names every public check, helper
    and constant the module defines (a new check added without it is not on the list a
    scenario author reads), and nothing it does not define."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parents[1] / "harness" / "checks.py").read_text())
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr))]
    first = body[0]
    assert isinstance(first, ast.Assign) and first.targets[0].id == "__all__"
    listed = [e.value for e in first.value.elts]
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id != "__all__"
    }
    public = {name for name in defined if not name.startswith("_")}
    assert sorted(public - set(listed)) == []  # defined, public, not listed
    assert sorted(set(listed) - defined) == []  # listed, not defined here
    assert len(listed) == len(set(listed))


def test_only_the_engine_kinds_test_which_engine_runs():
    """What differs between engines is asked of the engine's kind (harness.engines.kinds):
    a test of `kind == "vllm"` elsewhere is a place a third engine would be missed."""
    import ast
    from pathlib import Path

    from harness.engines.kinds import KINDS

    root = Path(__file__).resolve().parents[1]

    def names_kind(node) -> bool:
        name = getattr(node, "attr", None) or getattr(node, "id", None) or ""
        return name.endswith("kind")

    found = []
    for folder in ("harness", "scenarios", "loadgen"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("harness", "engines"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                consts = [s.value for s in sides if isinstance(s, ast.Constant)]
                consts += [
                    e.value
                    for s in sides
                    if isinstance(s, (ast.Tuple, ast.List, ast.Set))
                    for e in s.elts
                    if isinstance(e, ast.Constant)
                ]
                if any(names_kind(s) for s in sides) and set(consts) & set(KINDS):
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"engine kinds tested outside harness/engines: {found}"


def test_the_scenario_stays_small_and_built_of_parts():
    """Scenario holds the steps every scenario has; what several share is in its parts
    (disruption, recovery, versions, preconditions, witnesses, the scaler hand-over),
    and what one uses in that scenario's file: a new scenario does not grow it."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parents[1] / "harness" / "scenario.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scenario"]
    assert cls.end_lineno - cls.lineno + 1 < 300
    parts = {"disruption", "recovery", "versions", "preconditions", "witnesses", "scaler"}
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = {
        t.attr
        for n in ast.walk(init)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute)
    }
    assert parts <= assigned


def test_event_kinds_are_the_enums_members():
    """Every kind a target or a scenario writes is an EventKind (EventLog.emit refuses
    another at run time; this finds it before), and the code reads an event's kind by the
    member, not by a string a typo would leave matching nothing."""
    import ast
    from pathlib import Path

    from harness.events import KINDS

    root = Path(__file__).resolve().parents[1]
    unknown, literal = [], []
    for folder in ("harness", "scenarios"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("harness", "sim"):
                continue  # the simulator's own emit() sends bytes
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and node.args:
                    name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                    first = node.args[0]
                    if name in ("emit", "_emit") and isinstance(first, ast.Constant):
                        if first.value not in KINDS:
                            unknown.append(f"{rel}:{node.lineno} {first.value!r}")
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    of_event = any(
                        getattr(s, "attr", None) == "kind"
                        and isinstance(s.value, ast.Name)
                        and s.value.id in ("e", "ev", "event", "found", "seen", "x", "evidence")
                        for s in sides
                    )
                    consts = [s for s in sides if isinstance(s, ast.Constant)]
                    consts += [e for s in sides for e in getattr(s, "elts", [])]
                    if of_event and any(
                        isinstance(c, ast.Constant) and c.value in KINDS for c in consts
                    ):
                        literal.append(f"{rel}:{node.lineno}")
    assert not unknown, f"event kinds that are not EventKind members: {unknown}"
    assert not literal, f"an event's kind compared with a string, not an EventKind: {literal}"
