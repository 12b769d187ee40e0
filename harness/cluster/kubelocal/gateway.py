"""kube-local's Gateway API implementation: Traefik (scripts/build-traefik) with its
Kubernetes Gateway provider, run on this machine against kube-local's API server (by
its kubeconfig), one per namespace, reaching the pods on kube-local's bridges.

It serves a Gateway (`inference-gateway`) whose HTTP listener's port is Traefik's own
entryPoint's (Traefik matches them by port), of the GatewayClass `rollcheck-traefik`;
the HTTPRoutes of that namespace attached to it are what it routes by, backendRefs
weights included, and it writes their status (Accepted, with the generation it
programmed), as on a cluster. Its JSON access log keeps each request's X-Request-Id, so
every stream is traced to its pod (harness.gateway_logs.parse_traefik_json). Traefik's
Gateway provider does not implement the RequestMirror filter (docs/facts.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.route import parents_accepted
from harness.cluster.kubelocal.daemons import Daemons, built
from harness.errors import RollcheckError
from harness.files import write_atomic
from harness.proc import free_port

ROOT = Path(__file__).resolve().parents[3]
TRAEFIK_SCRIPT = ROOT / "scripts" / "build-traefik"
GROUP, VERSION = "gateway.networking.k8s.io", "v1"
CLASS = "rollcheck-traefik"
CONTROLLER = "traefik.io/gateway-controller"
GATEWAY = "inference-gateway"
READY_S = 60.0


class GatewayError(RollcheckError, RuntimeError):
    """kube-local's gateway could not be built or started: one line."""


def traefik_binary() -> Path:
    folder = built(
        TRAEFIK_SCRIPT,
        "ROLLCHECK_TRAEFIK_DIR",
        lambda line: GatewayError(f"building Traefik failed ({line})"),
    )
    return folder / "traefik"


def traefik_config(port: int, namespace: str, folder: Path) -> dict:
    """Traefik's static configuration: one entryPoint, the Gateway provider watching one
    namespace, a JSON access log keeping X-Request-Id, and nothing that calls out."""
    return {
        "global": {"checkNewVersion": False, "sendAnonymousUsage": False},
        "entryPoints": {"web": {"address": f"127.0.0.1:{port}"}},
        "providers": {
            "kubernetesGateway": {
                "namespaces": [namespace],
                "statusAddress": {"ip": "127.0.0.1"},
            }
        },
        "accessLog": {
            "filePath": str(folder / "access.log"),
            "format": "json",
            "fields": {"headers": {"defaultMode": "drop", "names": {"X-Request-Id": "keep"}}},
        },
        "log": {"level": "INFO", "filePath": str(folder / "traefik.log")},
    }


class TraefikGateway:
    """One Traefik serving one namespace's Gateway; `url` is where clients stream from."""

    def __init__(self, api: client.ApiClient, kubeconfig: Path, namespace: str, folder: Path):
        self.api, self.kubeconfig, self.namespace = api, Path(kubeconfig), namespace
        self.dir = Path(folder)
        self.custom = client.CustomObjectsApi(api)
        self.daemons = Daemons(self.dir, f"kube-local-gateway-{namespace}", GatewayError)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def start(self) -> TraefikGateway:
        binary = traefik_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._ensure_class()
        self._create(
            "gateways",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Gateway",
                "metadata": {"name": GATEWAY},
                "spec": {
                    "gatewayClassName": CLASS,
                    "listeners": [
                        {
                            "name": "http",
                            "port": self.port,
                            "protocol": "HTTP",
                            "allowedRoutes": {"namespaces": {"from": "Same"}},
                        }
                    ],
                },
            },
        )
        config = self.dir / "traefik.json"
        write_atomic(config, json.dumps(traefik_config(self.port, self.namespace, self.dir)))
        env = os.environ | {"KUBECONFIG": str(self.kubeconfig)}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never the in-cluster client
        self.daemons.spawn("traefik", [str(binary), f"--configFile={config}"], env)
        self.daemons.wait(self._programmed, "Traefik's Gateway", READY_S)
        return self

    def _programmed(self) -> bool:
        gw = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "gateways", GATEWAY
        )
        conds = (gw.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Programmed" and c["status"] == "True" for c in conds)

    def _ensure_class(self) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GatewayClass",
            "metadata": {"name": CLASS},
            "spec": {"controllerName": CONTROLLER},
        }
        try:
            self.custom.create_cluster_custom_object(GROUP, VERSION, "gatewayclasses", body)
        except ApiException as exc:
            if exc.status != 409:  # made for an earlier namespace: the same class
                raise GatewayError(f"creating GatewayClass {CLASS}: HTTP {exc.status}") from None

    def _create(self, plural: str, body: dict) -> None:
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, body
            )
        except ApiException as exc:
            raise GatewayError(
                f"creating {body['kind']} {body['metadata']['name']} in {self.namespace}: "
                f"HTTP {exc.status} (are the Gateway API CRDs applied?)"
            ) from None

    def stop(self) -> None:
        self.daemons.stop()


def wait_route_accepted(custom, namespace: str, name: str, timeout_s: float = 30.0) -> dict:
    """The HTTPRoute once its gateway has Accepted its current generation."""
    deadline = time.monotonic() + timeout_s
    while True:
        route = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "httproutes", name)
        if parents_accepted(route, route["metadata"]["generation"]):
            return route
        if time.monotonic() > deadline:
            raise GatewayError(f"HTTPRoute {namespace}/{name} not accepted in {timeout_s:g} s")
        time.sleep(0.1)
