"""Every file rollcheck writes goes through here: never through a link, never half.

A run folder may arrive as a CI artifact, and the nightly runs as root, so a
`report.html` or `summary.json` that is a symlink must not redirect a write to
wherever it points. Whole files are written to a temporary file in the same
folder and renamed into place (a reader sees the old file or the new one,
never half of one); logs and records that grow are opened for appending with
O_NOFOLLOW. A destination that is a link or not a regular file is refused with
one line (UnsafeDestination).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from harness.errors import RollcheckError


class UnsafeDestination(RollcheckError, OSError):
    """A file rollcheck would write is a symlink or not a regular file."""


def check_destination(path: Path) -> None:
    """Refuse a destination that exists and is a link or not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDestination(
            f"{path} is a symbolic link; rollcheck does not write through links: "
            "remove it, or give another folder"
        )
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeDestination(
            f"{path} exists and is not a regular file; remove it, or give another folder"
        )


@contextlib.contextmanager
def atomic(path: Path, binary: bool = False) -> Iterator[IO]:
    """A file object whose content replaces `path` only when the block ends without error."""
    path = Path(path)
    check_destination(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # named for the file asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
        os.chmod(tmp, 0o644)
        check_destination(path)  # it may have become a link while we wrote
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, data: str | bytes | Iterable[str]) -> None:
    """Write the whole of `path` (text, bytes or an iterable of text pieces)."""
    with atomic(path, binary=isinstance(data, bytes)) as f:
        if isinstance(data, (str, bytes)):
            f.write(data)
        else:
            for piece in data:
                f.write(piece)


def open_append(path: Path, binary: bool = False, truncate: bool = False) -> IO:
    """Open a log or a record file for appending (truncate: start it empty), never
    through a link and only when it is a regular file."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if truncate else os.O_APPEND
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link, or a FIFO with no reader
            check_destination(path)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_destination(path)
    os.set_blocking(fd, True)
    if binary:
        return os.fdopen(fd, "ab" if not truncate else "wb")
    return os.fdopen(fd, "a" if not truncate else "w", encoding="utf-8")


def check_writable(folder: Path) -> None:
    """Create `folder` and prove a file can be written there, before any work is done."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".rollcheck-write-check.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UnsafeDestination(
            f"cannot write to {folder}: {exc.strerror or exc}; give a writable folder with --out"
        ) from None


# --- reading what a run folder holds: sizes bounded, shapes checked -------------------

MAX_JSON_BYTES = 64 << 20  # summary.json, index.json: a real one is kilobytes
MAX_LOG_BYTES = 256 << 20  # records.jsonl, events.jsonl: a night's run is megabytes
MAX_LINE_BYTES = 1 << 20  # one record or event


class BadInput(RollcheckError, ValueError):
    """A file rollcheck reads is too large, not a regular file or not the right shape."""


def check_input(path: Path, limit: int) -> int:
    """The size of `path`, refusing a link to a non-file, a FIFO or a file over limit."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path} is not a regular file; remove it or rerun the run")
    if st.st_size > limit:
        raise BadInput(
            f"{path} is {st.st_size} bytes, over rollcheck's {limit} byte limit for it; "
            "it is not a file rollcheck wrote"
        )
    return st.st_size


def read_json(path: Path, kind: type = dict, limit: int = MAX_JSON_BYTES):
    """A JSON file that must hold a `kind` (an object by default), or one BadInput line."""
    check_input(path, limit)
    try:
        value = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path} is not readable JSON ({exc}); rerun the run or remove it") from None
    if not isinstance(value, kind):
        raise BadInput(
            f"{path} holds a JSON {type(value).__name__}, not the {kind.__name__} rollcheck "
            "writes there; rerun the run or remove it"
        )
    return value


def read_lines(path: Path, limit: int = MAX_LOG_BYTES, line_limit: int = MAX_LINE_BYTES):
    """(line number, text) of a JSON-lines file, holding one bounded line at a time."""
    check_input(path, limit)
    with open(path, encoding="utf-8", errors="replace") as f:
        n = 0
        while True:
            line = f.readline(line_limit + 1)
            if not line:
                return
            n += 1
            if len(line) > line_limit:
                raise BadInput(
                    f"{path}:{n}: a line over {line_limit} bytes; not a rollcheck record"
                )
            if line.strip():
                yield n, line
