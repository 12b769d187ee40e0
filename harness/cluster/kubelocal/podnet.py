"""The pod network of kube-local: pod IPs that exist only as names for loopback addresses.

Kubernetes refuses loopback addresses in EndpointSlices, so pods get addresses in
a pod CIDR (as a CNI would assign) while their processes listen on 127.x
addresses. Nothing dials a pod IP directly: the ingress translates through this
table, and the API server reaches pods (pods proxy) through its egress selector,
an HTTP CONNECT proxy that only ever connects to addresses in the table and to the
node agent's kubelet log endpoint.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

POD_CIDR_PREFIX = "10.244"


class PodNetwork:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._to_local: dict[str, str] = {}
        self._kubelets: set[tuple[str, int]] = set()

    def allocate(self) -> tuple[str, str]:
        """A pod IP and the loopback address its process listens on."""
        with self._lock:
            self._seq += 1
            hi, lo = divmod(self._seq, 250)
            pod_ip = f"{POD_CIDR_PREFIX}.{hi}.{lo + 1}"
            local = f"127.1.{hi}.{lo + 1}"
            self._to_local[pod_ip] = local
            return pod_ip, local

    def local(self, pod_ip: str) -> str | None:
        with self._lock:
            return self._to_local.get(pod_ip)

    def release(self, pod_ip: str) -> None:
        with self._lock:
            self._to_local.pop(pod_ip, None)

    def allow_kubelet(self, address: str, port: int) -> None:
        """A node's kubelet endpoint, the one other address the API server may dial."""
        with self._lock:
            self._kubelets.add((address, port))

    def dial(self, host: str, port: int) -> str | None:
        """Where a CONNECT to host:port goes: a pod's loopback address, a kubelet, or
        nowhere (None)."""
        with self._lock:
            if (host, port) in self._kubelets:
                return host
            return self._to_local.get(host)


class ConnectProxy:
    """HTTP CONNECT for the API server's egress selector ("cluster" traffic)."""

    def __init__(self, net: PodNetwork, socket_path: Path):
        self.net = net
        self.path = Path(socket_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        # A Unix socket: the API server's TCP egress transport insists on TLS.
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.sock.listen(64)
        self._stop = False
        threading.Thread(target=self._accept, name="podnet-proxy", daemon=True).start()

    def egress_config(self) -> str:
        return f"""apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: {self.path}
"""

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                part = conn.recv(4096)
                if not part:
                    return
                head += part
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            host, _, port = (
                line[1].rpartition(":") if len(line) > 1 and line[0] == "CONNECT" else ("", "", "")
            )
            local = self.net.dial(host, int(port)) if port.isdigit() else None
            if local is None:  # never dial anything that is not one of our pods or kubelets
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            upstream = socket.create_connection((local, int(port)), timeout=5)
        except (OSError, ValueError):
            conn.close()
            return
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        rest = head.split(b"\r\n\r\n", 1)[1]
        if rest:
            upstream.sendall(rest)
        upstream.settimeout(None)
        threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()
        _pipe(conn, upstream)

    def stop(self) -> None:
        self._stop = True
        self.sock.close()
        self.path.unlink(missing_ok=True)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
