"""The kubelet's log endpoint for kube-local's node agent: what the API server calls for
`pods/log` (GET /containerLogs/{namespace}/{pod}/{container}, over TLS).

The API server dials the node's InternalIP at its kubelet port (daemonEndpoints)
through the egress proxy, as on a real cluster; a container's log is its process's
output, or the file a pod names with the `rollcheck.io/log-file` annotation (kube-local
runs its ingress outside pods: an ingress-nginx controller pod that serves the ingress's
access log is how the real-cluster log path is exercised here). `follow=true` streams
new lines until the client leaves; `sinceSeconds` starts at the end of the log.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

LOG_FILE_ANNOTATION = "rollcheck.io/log-file"


class KubeletLogServer:
    def __init__(self, log_file: Callable[[str, str], Path | None], cert: Path, key: Path):
        self._log_file = log_file
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server._serve(self)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="kubelet-logs", daemon=True
        )

    def start(self) -> KubeletLogServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        url = urlparse(req.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            req.send_error(404, "only /containerLogs/{namespace}/{pod}/{container}")
            return
        path = self._log_file(parts[1], parts[2])
        if path is None:
            req.send_error(404, f"pod {parts[1]}/{parts[2]} is not on this node")
            return
        query = parse_qs(url.query)
        follow = query.get("follow", ["false"])[0] == "true"
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.end_headers()
        try:
            with open(path, "rb") as f:
                if "sinceSeconds" in query or "sinceTime" in query:
                    f.seek(0, 2)  # from now: the lines written from here on
                while True:
                    data = f.read(65536)
                    if data:
                        req.wfile.write(data)
                        req.wfile.flush()
                        continue
                    if not follow or self._stop.is_set():
                        return
                    time.sleep(0.1)
        except (OSError, ValueError):
            return  # the client left, or the log went away
