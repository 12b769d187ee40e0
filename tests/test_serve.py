"""`rollcheck serve` as a reviewer meets it: the history first, a night's index and its
reports, and nothing outside the reports folder (`..`, symlinks out), nothing written."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from harness.proc import free_port

pytestmark = pytest.mark.process


@pytest.fixture
def served(tmp_path):
    reports = tmp_path / "reports"
    night = reports / "20261205-020000-kube"
    (night / "test_drain_pod").mkdir(parents=True)
    (reports / "history.html").write_text("<h1>history</h1>")
    (night / "index.html").write_text("<h1>night</h1>")
    (night / "junit.xml").write_text("<testsuites/>")
    (night / "test_drain_pod" / "summary.json").write_text('{"verdict": "pass"}')
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.txt").write_text("outside too")
    os.symlink(secret, reports / "link-to-file.txt")
    os.symlink(tmp_path / "elsewhere", reports / "link-to-folder")
    os.symlink(night / "index.html", reports / "latest.html")  # a link inside: served
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", str(reports), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "rollcheck serve did not listen"
            time.sleep(0.1)
    yield url, port, reports
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)


def raw(port: int, method: str, path: str) -> int:
    """The status of a request sent as written (httpx would resolve `..` itself)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path)
    status = conn.getresponse().status
    conn.close()
    return status


def test_serves_the_history_first_and_each_nights_reports(served):
    url, _, _ = served
    first = httpx.get(url + "/", follow_redirects=False)
    assert first.status_code == 302 and first.headers["location"] == "/history.html"
    assert httpx.get(url + "/", follow_redirects=True).text == "<h1>history</h1>"
    night = httpx.get(url + "/20261205-020000-kube/")
    assert night.status_code == 200 and night.text == "<h1>night</h1>"
    junit = httpx.get(url + "/20261205-020000-kube/junit.xml")
    assert junit.status_code == 200 and junit.headers["content-type"].startswith("application/xml")
    listing = httpx.get(url + "/20261205-020000-kube/test_drain_pod/")
    assert listing.status_code == 200 and "summary.json" in listing.text
    assert httpx.get(url + "/latest.html").text == "<h1>night</h1>"


def test_refuses_paths_out_of_the_folder_and_every_write(served):
    url, port, reports = served
    for path in ("/../secret.txt", "/20261205-020000-kube/../../secret.txt", "/%2e%2e/secret.txt"):
        assert raw(port, "GET", path) == 404, path
    assert httpx.get(url + "/link-to-file.txt").status_code == 404
    assert httpx.get(url + "/link-to-folder/").status_code == 404
    assert httpx.get(url + "/link-to-folder/x.txt").status_code == 404
    root_listing = httpx.get(url + "/20261205-020000-kube/test_drain_pod/").text
    assert "outside" not in root_listing
    before = sorted(p.name for p in reports.rglob("*"))
    for method in ("PUT", "POST", "DELETE"):
        assert raw(port, method, "/history.html") == 405
    assert sorted(p.name for p in reports.rglob("*")) == before
    assert (reports / "history.html").read_text() == "<h1>history</h1>"


def test_a_folder_that_is_not_there_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "serve", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"rollcheck serve: {tmp_path / 'missing'} is not a folder; give the reports folder "
        "(--reports-dir)"
    ]
