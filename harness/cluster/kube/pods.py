"""How the Kubernetes target reaches one pod's engine (its /metrics, /health and golden
prompts): the pod's IP when it answers from here, else the API server's pods proxy."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

import httpx
import urllib3
from kubernetes.client.rest import ApiException

from harness.client import http_get
from harness.cluster.kube.common import Cluster, Shared
from harness.prometheus import parse_metrics

# an engine's /metrics or /health through the API server's pods proxy: a pod whose address
# went away (drained, deleted) left the proxy dialling it for 24-30 s, and the engines'
# witness read the drained pod once more after the load stopped, so every drain on a
# cluster judged half a minute late (seen in its phase lines: "stopping the load" at
# +9.7 s, "judging" at +37.7 s); a live engine answers in milliseconds
POD_READ_TIMEOUT_S = 5.0


class PodAccess:
    """The ways to one pod's engine, the one that last worked first (kube.pod_access:
    auto, direct or proxy); `headers`: the load's API key for the engine."""

    def __init__(self, c: Cluster, shared: Shared, headers: Callable[[], dict]):
        self.c, self.s, self.headers = c, shared, headers
        self.path_ok: str | None = None  # direct or proxy: the way that last worked
        self.problem: str | None = None  # what was tried when no way worked

    def pod_metrics(self, name: str) -> dict[str, float]:
        status, text = self._pod_get(name, "metrics")
        return parse_metrics(text) if status == 200 else {}

    def paths(self) -> list[str]:
        """The ways to reach a pod's engine, the one that last worked first."""
        mode = self.c.k.pod_access
        if mode != "auto":
            return [mode]
        paths = ["direct", "proxy"] if os.environ.get("KUBERNETES_SERVICE_HOST") else ["proxy"]
        paths += [p for p in ("direct", "proxy") if p not in paths]
        if self.path_ok in paths:
            paths.remove(self.path_ok)
            paths.insert(0, self.path_ok)
        return paths

    def _pod_get(self, name: str, path: str) -> tuple[int | None, str]:
        """GET a pod engine's path: (its HTTP status, body), or (None, "") when no way to
        the pod worked; then `pod_access_problem` says, in one line, what was tried."""
        tried = []
        for way in self.paths():
            if way == "direct":
                with self.s.lock:
                    pod = next((p for p in self.s.pods.values() if p.metadata.name == name), None)
                ip = pod.status.pod_ip if pod is not None and pod.status else None
                if not ip:
                    tried.append("pod IP: none assigned")
                    continue
                url = f"http://{ip}:{self.s.port}/{path}"
                try:
                    r = http_get(url, timeout=2.0, headers=self.headers())
                except httpx.HTTPError as exc:
                    tried.append(f"pod IP {ip}:{self.s.port}: {type(exc).__name__}")
                    continue
                if r.status_code == 404:  # not the engine (it serves both paths): a network
                    tried.append(f"pod IP {ip}:{self.s.port}: HTTP 404, not an engine")
                    continue
                self.path_ok, self.problem = way, None
                return r.status_code, r.text
            try:
                text = self.c.core.connect_get_namespaced_pod_proxy_with_path(
                    f"{name}:{self.s.port}", self.c.ns, path, _request_timeout=POD_READ_TIMEOUT_S
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # (the bound above)
                tried.append(f"API server pods proxy: {type(exc).__name__}")
                continue
            except ApiException as exc:
                if exc.status in (401, 403) or exc.status is None:
                    tried.append(
                        f"API server pods proxy: HTTP {exc.status} (needs pods/proxy get)"
                        if exc.status
                        else f"API server pods proxy: {exc.reason}"
                    )
                    continue
                self.path_ok, self.problem = way, None
                return exc.status, exc.body or ""  # the engine's own answer, or the API's
            self.path_ok, self.problem = way, None
            return 200, text
        self.problem = f"engine /{path} of pod {name} unreachable: " + "; ".join(tried)
        return None, ""

    def pod_endpoint(self, name: str) -> tuple[str, dict]:
        """Where golden prompts reach one pod: its IP when its engine answers from here (in
        a pod of the cluster, or on kube-local's bridges), else the API server's pods proxy
        with the kubeconfig's credentials (RBAC: pods/proxy get). The direct way comes
        first: on kube-local the pods proxy cut 2 of about 70 answers mid-stream in one
        run ("use of closed network connection" on its side; docs/facts.md), and an
        answer cut by the way there is not the candidate's."""
        direct = self._direct_endpoint(name) if self.c.k.pod_access != "proxy" else None
        if direct is not None:
            return direct
        c = self.c.api.configuration
        url = f"{c.host}/api/v1/namespaces/{self.c.ns}/pods/{name}:{self.s.port}/proxy"
        ctx: ssl.SSLContext | bool = False
        if c.verify_ssl:
            ctx = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if c.cert_file and c.key_file:
            if ctx is False:
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            ctx.load_cert_chain(c.cert_file, c.key_file)
        settings: dict = {"verify": ctx}
        token = (c.api_key or {}).get("authorization") or (c.api_key or {}).get("BearerToken")
        if token:
            prefix = (c.api_key_prefix or {}).get("authorization", "")
            settings["headers"] = {"Authorization": f"{prefix} {token}".strip()}
        return url, settings

    def _direct_endpoint(self, name: str) -> tuple[str, dict] | None:
        with self.s.lock:
            pod = next((p for p in self.s.pods.values() if p.metadata.name == name), None)
        ip = pod.status.pod_ip if pod is not None and pod.status else None
        if not ip:
            return None
        url = f"http://{ip}:{self.s.port}"
        headers = self.headers()
        try:
            r = http_get(url + "/health", timeout=1.0, headers=headers)
        except httpx.HTTPError:
            return None  # unroutable from here, as pod IPs usually are outside a cluster
        if r.status_code == 404:  # not the engine
            return None
        return url, ({"headers": headers} if headers else {})

    def pod_health(self, name: str) -> int | None:
        status, _ = self._pod_get(name, "health")
        return status if status and status < 600 and status != 404 else None
