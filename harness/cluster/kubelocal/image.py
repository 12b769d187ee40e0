"""The simulator image, built on this machine without a registry.

The image is this Python (its interpreter, standard library and the shared libraries
they link), the packages the simulator imports, the package itself, and `sleep`,
`tail` and `sh` for preStop hooks and log followers: a docker-archive tar that each
node's containerd imports. Everything is copied from the installed files, which are
byte-compiled already (the package is compiled here): without .pyc files the
simulator took 4.0 s to answer in a container, 1.7 s on the host.

The tar is cached by content under ~/.cache/rollcheck/images: the list of files with
their sizes and modification times names it, so a change to the package builds a new
image and nothing else does; images unused for a day are removed. One layer carries
several names: the simulator under
`localhost/rollcheck/sim:<tag>` for each tag in TAGS, and the pod sandbox (`sleep
infinity`, which containerd stops with SIGKILL) as `localhost/rollcheck/pause:1`.

The runner image (`runner_image`, RUNNER) is the Dockerfile's image made the same way,
for the chart's pods on kube-local: rollcheck with the closure of its run-time
dependencies (harness.dist), the scenarios under /app, user RUNNER_UID. Only the tests
that install the chart import it (KubeLocal.load_image).
"""

from __future__ import annotations

import compileall
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

import harness
from harness.dist import closure
from harness.errors import RollcheckError

IMAGE = "localhost/rollcheck/sim"
# rollcheck itself, for in-cluster runs (the chart's nightly and its report server): what
# the Dockerfile builds, made here from the installed files without a registry
RUNNER = "localhost/rollcheck/rollcheck"
RUNNER_UID = 10001  # a user of its own, as the Dockerfile's: Pod Security "restricted"
TAGS = ("v1", "v2", "v3", "v4", "latest")
PAUSE = "localhost/rollcheck/pause:1"
# What `rollcheck sim` imports beyond the standard library (python -X importtime), and
# what those import lazily when the first request comes.
SIM_PACKAGES = (
    "anyio",
    "click",
    "h11",
    "httptools",
    "idna",
    "prometheus_client",
    "sniffio",
    "typing_extensions",
    "uvicorn",
    "uvloop",
    "websockets",
    "yaml",
    "_yaml",
)
TOOLS = ("sleep", "tail", "sh", "cat")
# Merged /usr on Debian: these are links into /usr, in the image as on the host.
MERGED = {"/bin": "/usr/bin", "/sbin": "/usr/sbin", "/lib": "/usr/lib", "/lib64": "/usr/lib64"}
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rollcheck" / "images"


class ImageError(RollcheckError, RuntimeError):
    """The image could not be built: one line."""


def _usr(path: str) -> str:
    """A path with merged-/usr prefixes written the /usr way (no member through a link)."""
    for link, target in MERGED.items():
        if path == link or path.startswith(link + "/"):
            return target + path[len(link) :]
    return path


def _linked_libraries(binaries: list[Path]) -> set[str]:
    libs: set[str] = set()
    for chunk in range(0, len(binaries), 200):
        r = subprocess.run(
            ["ldd", *map(str, binaries[chunk : chunk + 200])], capture_output=True, text=True
        )
        for m in re.finditer(r"(?:=> )?(/\S+) \(0x", r.stdout):
            libs.add(m.group(1))
    return libs


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _sources() -> dict[str, Path]:
    """Every file of the simulator image, by its path in the image."""
    return _with_libraries(_base() | _site(_sim_files()))


def _base() -> dict[str, Path]:
    """This Python (interpreter, standard library), the package, and TOOLS."""
    files: dict[str, Path] = {}
    base = Path(sys.base_prefix)
    exe = Path(os.path.realpath(sys.executable))
    files[str(exe)] = exe
    for lib in (base / "lib").glob("libpython*.so*"):
        files[str(lib)] = lib
    stdlib = _site_packages_in_image().parent
    for path in stdlib.rglob("*"):
        rel = path.relative_to(stdlib).parts
        if rel[0] in STDLIB_SKIP or path.is_dir() or ".opt-" in path.name:
            continue
        files[str(path)] = path
    package = Path(harness.__file__).parent
    for p in package.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            files[str(_site_packages_in_image() / "harness" / p.relative_to(package))] = p
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found is None:
            raise ImageError(f"the simulator image needs {tool!r}, which is not installed")
        files[f"/usr/bin/{tool}"] = Path(os.path.realpath(found))
    return files


def _site(relative: dict[str, Path]) -> dict[str, Path]:
    """Files of this site-packages (by their path in it) at their place in the image."""
    return {str(_site_packages_in_image() / rel): path for rel, path in relative.items()}


def _sim_files() -> dict[str, Path]:
    """What `rollcheck sim` imports (SIM_PACKAGES), by path in site-packages."""
    files: dict[str, Path] = {}
    site = _site_packages()
    for name in SIM_PACKAGES:
        for path in [site / name, *site.glob(f"{name}.*.so"), site / f"{name}.py"]:
            if path.is_dir():
                for p in path.rglob("*"):
                    if p.is_file() and ".opt-" not in p.name:
                        files[str(p.relative_to(site))] = p
            elif path.is_file():
                files[path.name] = path
    return files


def _with_libraries(files: dict[str, Path]) -> dict[str, Path]:
    """The files and every shared library their binaries link, /usr-merged paths."""
    exe = Path(os.path.realpath(sys.executable))
    binaries = [exe, *[p for p in files.values() if p.suffix == ".so" or ".so." in p.name]]
    binaries += [files[f"/usr/bin/{t}"] for t in TOOLS]
    for lib in _linked_libraries(binaries):
        files.setdefault(_usr(lib), Path(os.path.realpath(lib)))
    return {_usr(k): v for k, v in files.items()}


def _digest(files: dict[str, Path]) -> str:
    h = hashlib.sha256(f"{sys.version}|{SIM_PACKAGES}|{TAGS}".encode())
    for dest, src in sorted(files.items()):
        st = src.stat()
        h.update(f"{dest}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _stage(files: dict[str, Path], root: Path) -> None:
    for dest, src in files.items():
        target = root / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    exe = Path(os.path.realpath(sys.executable))
    for name in ("python3", "python"):  # the entrypoint's name, on PATH in the image
        (root / "usr/bin" / name).symlink_to(exe)
        # and beside the interpreter, as installed: a virtualenv made with this Python
        # (real vLLM's, mounted into its pods) links bin/python3 there
        (root / str(exe.parent / name).lstrip("/")).symlink_to(exe.name)
    for link, target in MERGED.items():
        (root / link.lstrip("/")).symlink_to(target.lstrip("/"))
    for d in ("tmp", "etc", "proc", "sys", "dev", "var/run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc/passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nrollcheck:x:{RUNNER_UID}:{RUNNER_UID}::/tmp:/bin/sh\n"
    )
    (root / "etc/group").write_text(f"root:x:0:\nrollcheck:x:{RUNNER_UID}:\n")
    (root / "etc/resolv.conf").write_text("")
    site = root / str(_site_packages_in_image()).lstrip("/")
    if not compileall.compile_dir(
        str(site / "harness"), quiet=1, stripdir=str(root), prependdir="/", workers=0
    ):
        raise ImageError("byte-compiling the package for the simulator image failed")


def _site_packages_in_image() -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Path(sys.base_prefix) / "lib" / version / "site-packages"


def _config(entrypoint: list[str], diff_id: str, workdir: str = "/", user=None) -> bytes:
    config = {
        "Entrypoint": entrypoint,
        "Env": [
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ],
        "WorkingDir": workdir,
    }
    if user is not None:
        config["User"] = str(user)
    return json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        },
        sort_keys=True,
    ).encode()


def _archive(root: Path, out: Path) -> None:
    """The simulator and the pod sandbox, one layer."""
    _write_archive(
        root,
        out,
        [
            (
                ["python3", "-m", "harness.cli", "sim", "--host", "0.0.0.0"],
                {},
                [f"{IMAGE}:{t}" for t in TAGS],
            ),
            (["sleep", "infinity"], {}, [PAUSE]),
        ],
    )


def _write_archive(root: Path, out: Path, images: list[tuple[list[str], dict, list[str]]]) -> None:
    """A docker-archive of one layer (the folder `root`) and an image config per
    (entrypoint, _config options, tags)."""
    layer = out.with_suffix(".layer")
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    h = hashlib.sha256()
    with open(layer, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    diff_id = "sha256:" + h.hexdigest()
    layer_name = f"{h.hexdigest()}/layer.tar"
    configs, manifest = {}, []
    for entrypoint, options, tags in images:
        data = _config(entrypoint, diff_id, **options)
        name = hashlib.sha256(data).hexdigest() + ".json"
        configs[name] = data
        manifest.append({"Config": name, "RepoTags": tags, "Layers": [layer_name]})
    with tarfile.open(out, "w") as tar:
        tar.add(str(layer), arcname=layer_name)
        for name, data in [*configs.items(), ("manifest.json", json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    layer.unlink()


# Tars of one kind kept besides the one just made, newest first: every clean clone names
# a new one (its files' times differ), and a runner image is 700 MB. A tar removed while
# another checkout imports it stays readable to that import (an open file), and a
# checkout whose tar is gone builds it again in seconds.
KEEP_TARS = 2


def _prune(cache: Path, prefix: str, keep: Path) -> None:
    """Images of this kind unused for a day, and all but the newest KEEP_TARS others."""
    others = []
    for old in cache.glob(f"{prefix}*.tar"):
        try:
            if old != keep:
                others.append((old.stat().st_mtime, old))
        except OSError:
            continue
    others.sort(reverse=True)
    for i, (mtime, old) in enumerate(others):
        if i >= KEEP_TARS or time.time() - mtime > 86400:
            old.unlink(missing_ok=True)


def sim_image(cache: Path = CACHE) -> Path:
    """The image tar for this package and this Python: built once, then reused."""
    return _cached(cache, "sim", "the simulator image", _sources(), _archive)


def _cached(cache: Path, kind: str, what: str, files: dict[str, Path], finish) -> Path:
    """The image tar `<kind>-<digest of its files>.tar` in the cache: staged from
    `files` and written by `finish(root, out)` once, then reused; old ones pruned."""
    out = cache / f"{kind}-{_digest(files)}.tar"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
        root = Path(tmp) / "rootfs"
        try:
            _stage(files, root)
            part = Path(tmp) / "image.tar"
            finish(root, part)
        except OSError as exc:
            raise ImageError(f"building {what} in {cache} failed: {exc}") from None
        os.replace(part, out)
    _prune(cache, f"{kind}-", out)
    return out


# --- the runner: rollcheck itself -------------------------------------------------------
def _runner_files() -> dict[str, Path]:
    """The closure's files in site-packages (rollcheck's own package comes with _base),
    by path in site-packages; an editable install's finder is left out."""
    site = _site_packages().resolve()
    files: dict[str, Path] = {}
    for dist in closure():
        for rel in dist.files or []:
            path = Path(dist.locate_file(rel)).resolve()
            if "__editable__" in path.name or ".opt-" in path.name or not path.is_file():
                continue
            if path.is_relative_to(site):
                files[str(path.relative_to(site))] = path
    return files


def _app_files() -> dict[str, Path]:
    """The scenarios the nightly runs and their pytest configuration, under /app."""
    root = Path(harness.__file__).resolve().parent.parent
    wanted = [root / "pyproject.toml", root / "conftest.py", *root.glob("scenarios/*.py")]
    missing = [str(p) for p in wanted[:1] + [root / "scenarios"] if not p.exists()]
    if missing:
        raise ImageError(f"the runner image needs the repository's {', '.join(missing)}")
    return {f"/app/{p.relative_to(root)}": p for p in wanted if p.is_file()}


def _loadgen_files() -> dict[str, Path]:
    """rollcheck's second package (the Locust side), by path in site-packages: an
    editable install leaves it out of site-packages, as it does harness."""
    import loadgen

    package = Path(loadgen.__file__).parent
    return {
        str(Path("loadgen") / p.relative_to(package)): p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def runner_image(cache: Path = CACHE) -> Path:
    """The rollcheck image tar (RUNNER:<version> and :latest) for kube-local: this
    Python, rollcheck with what it needs at run time, the scenarios under /app; the
    entrypoints `rollcheck` and `pytest` on PATH. Built once per content."""
    files = _base() | _site(_runner_files() | _loadgen_files()) | _app_files()

    def finish(root: Path, out: Path) -> None:
        for name, module in (("rollcheck", "harness.cli"), ("pytest", "pytest")):
            script = root / "usr/bin" / name
            call = "main()" if name == "rollcheck" else "raise SystemExit(main())"
            script.write_text(f"#!/usr/bin/python3\nfrom {module} import main\n{call}\n")
            script.chmod(0o755)
        options = {"workdir": "/app", "user": RUNNER_UID}
        tags = [f"{RUNNER}:{t}" for t in _runner_tags()]
        _write_archive(root, out, [(["rollcheck"], options, tags)])

    return _cached(cache, "runner", "the runner image", _with_libraries(files), finish)


def _runner_tags() -> list[str]:
    from importlib import metadata

    return [metadata.version("rollcheck"), "latest"]
