"""`rollcheck serve`: the reports folder over HTTP, read-only, for a release review.

The chart runs it beside the nightly over the reports volume, so `kubectl port-forward
svc/<release>-reports 8080` opens the history. What it answers:

- `/` redirects to history.html (the nights, newest first) when there is one, else it
  lists the folder;
- a file inside the folder, with its type; a folder's index.html, else a listing of the
  folder (only of folders inside the reports folder);
- GET and HEAD only (405 for anything else); nothing outside the folder: a path whose
  real location (symlinks followed) leaves it is 404, as is `..`, and so is a symlink
  that points out of it, whether to a file or a folder.

Files are sent in chunks (a report can be large); nothing is written.
"""

from __future__ import annotations

import html
import mimetypes
import os
import shutil
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness.errors import RollcheckError

CHUNK = 1 << 16


class ServeError(RollcheckError):
    """The folder cannot be served: one line."""


def resolve(root: Path, url_path: str) -> Path | None:
    """The file or folder `url_path` names inside `root` (both real paths), or None when
    it is not there or lies outside (`..`, a symlink out)."""
    parts = [p for p in urllib.parse.unquote(url_path).split("/") if p not in ("", ".")]
    if any(p == ".." or "\0" in p for p in parts):
        return None
    path = Path(os.path.realpath(root.joinpath(*parts)))
    if path != root and not path.is_relative_to(root):
        return None
    return path if path.exists() else None


class Handler(BaseHTTPRequestHandler):
    server_version = "rollcheck-serve"
    root: Path  # set on the class by make_server

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _refuse(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    def log_message(self, format: str, *args) -> None:  # one line a request, on stderr
        super().log_message(format, *args)

    def _answer(self, body: bool) -> None:
        url = urllib.parse.urlsplit(self.path).path
        if url == "/" and (self.root / "history.html").is_file():
            self.send_response(HTTPStatus.FOUND)
            self.send_header("Location", "/history.html")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = resolve(self.root, url)
        if path is None:
            self.send_error(HTTPStatus.NOT_FOUND, "not in the reports folder")
            return
        if path.is_dir():
            if not url.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", url + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if (path / "index.html").is_file():
                path = path / "index.html"
            else:
                self._send_bytes(self._listing(path, url), "text/html; charset=utf-8", body)
                return
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND, "not readable")
            return
        with f:
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind in ("application/json", "application/xml"):
                kind += "; charset=utf-8"
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if body:
                shutil.copyfileobj(f, self.wfile, CHUNK)

    def _listing(self, folder: Path, url: str) -> bytes:
        """The entries of a folder inside the reports folder (a symlink out is left out)."""
        rows = []
        for entry in sorted(folder.iterdir(), key=lambda p: p.name, reverse=True):
            if resolve(self.root, f"{url}{entry.name}") is None:
                continue
            name = entry.name + ("/" if entry.is_dir() else "")
            href = urllib.parse.quote(name)
            rows.append(f'<li><a href="{href}">{html.escape(name)}</a></li>')
        title = html.escape(url)
        return (
            f"<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title>"
            f"<h1>{title}</h1><ul>{''.join(rows)}</ul></html>"
        ).encode()

    def _send_bytes(self, data: bytes, kind: str, body: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


def make_server(folder: Path, host: str, port: int) -> ThreadingHTTPServer:
    root = Path(os.path.realpath(folder))
    if not root.is_dir():
        raise ServeError(f"{folder} is not a folder; give the reports folder (--reports-dir)")
    if not os.access(root, os.R_OK | os.X_OK):
        raise ServeError(f"{folder} is not readable")
    handler = type("ReportsHandler", (Handler,), {"root": root})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    return server
