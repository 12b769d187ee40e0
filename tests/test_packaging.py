"""What the image ships: every run-time dependency pinned (constraints.txt) at a
version pyproject.toml allows and the virtualenv runs the tests with; the Dockerfile
installing with those pins as a user of its own; and `rollcheck --version`."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from harness.dist import closure

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[a-z0-9.-]+", name), f"not a pin: {line!r}"
            out[name] = version
    return out


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.unit
def test_every_dependency_of_pyproject_is_pinned_at_a_version_it_allows():
    pinned = pins()
    for text in project()["dependencies"]:
        req = Requirement(text)
        name = req.name.lower().replace("_", "-")
        assert name in pinned, f"{name} is not pinned in constraints.txt: run bash scripts/lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (text, pinned[name])


@pytest.mark.unit
def test_the_pins_are_what_the_tests_run_with_no_more_no_fewer():
    """bash scripts/run installs with constraints.txt, so the tests exercise the versions
    the image ships; a dependency added to pyproject.toml without a new lock fails here."""
    installed = {
        d.metadata["Name"].lower().replace("_", "-"): d.version
        for d in closure()
        if d.metadata["Name"].lower() != "rollcheck"
    }
    assert installed == pins(), "constraints.txt is out of date: run bash scripts/lock"


@pytest.mark.unit
def test_the_dockerfile_installs_the_pins_and_runs_as_a_user_of_its_own():
    text = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -c constraints.txt ." in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    assert "COPY scenarios ./scenarios" in text  # the nightly runs pytest scenarios


@pytest.mark.process
def test_rollcheck_version_says_the_packages_version():
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == f"rollcheck {project()['version']}"
