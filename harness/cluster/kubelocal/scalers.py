"""The cluster's own autoscalers on kube-local: Prometheus scraping every engine pod's
/metrics (the pods found through the API server, as kubernetes_sd does on a cluster), KEDA's
operator and its metrics API server built from KEDA's Go module (scripts/build-keda),
and that API server registered as external.metrics.k8s.io through the API server's
aggregation layer, where kube-controller-manager's HPA controller reads it.

They run on this machine, not as pods (there is no cluster DNS or kube-proxy here): the
operator and the metrics API server talk gRPC over loopback with mutual TLS, and the
metrics API server's Service has one endpoint, the first node's address (its bridge's
gateway, which is this machine).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client

from harness.client import http_get
from harness.cluster.kubelocal.controlplane import ControlPlane, serving_cert
from harness.cluster.kubelocal.crds import apply_crds
from harness.cluster.kubelocal.daemons import Daemons, built
from harness.errors import RollcheckError
from harness.files import write_atomic
from harness.proc import free_port

ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = ROOT / "scripts" / "build-keda"
KEDA_NS = "keda"
METRICS_SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"


class ScalersError(RollcheckError, RuntimeError):
    """Prometheus or KEDA could not be built or started: one clear line."""


def keda_dir() -> Path:
    """KEDA's binaries and CRDs, built on first use (minutes once, then instant)."""
    return built(
        BUILD_SCRIPT,
        "ROLLCHECK_KEDA_BIN",
        lambda line: ScalersError(f"building KEDA failed ({line})"),
    )


def prometheus_binary() -> Path:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if not found:
        raise ScalersError(
            "kube-local's scalers need Prometheus: install it with apt-get install prometheus "
            "(bash scripts/run test does, as root)"
        )
    return Path(found)


def prometheus_config(targets_file: Path, interval_s: float = 1.0) -> dict:
    """Every engine pod (its container port named `http`, as in deploy/), labelled with
    its namespace and pod as kubernetes_sd labels them on a cluster. Debian's Prometheus
    2.42 is built without kubernetes_sd ("field kubernetes_sd_configs not found in type
    config.ScrapeConfig"), so the pods come from a file that engine_targets() keeps
    current from the API server (Prometheus re-reads it on change)."""
    return {
        "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "engines",
                "scrape_timeout": f"{interval_s:g}s",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            }
        ],
    }


def engine_targets(pods) -> list[dict]:
    """Prometheus file_sd targets: each running pod's container port named `http`."""
    out = []
    for p in pods:
        if p.status.phase != "Running" or not p.status.pod_ip:
            continue
        for c in p.spec.containers:
            for port in c.ports or []:
                if port.name == "http":
                    out.append(
                        {
                            "targets": [f"{p.status.pod_ip}:{port.container_port}"],
                            "labels": {"namespace": p.metadata.namespace, "pod": p.metadata.name},
                        }
                    )
    return sorted(out, key=lambda t: t["targets"][0])


class Scalers:
    """Prometheus, KEDA's operator and metrics API server for one running kube-local."""

    def __init__(self, control_plane: ControlPlane, api: client.ApiClient, host_ip: str):
        self.cp, self.api, self.host_ip = control_plane, api, host_ip
        self.dir = control_plane.dir.parent / "scalers"
        self.daemons = Daemons(self.dir, "kube-local-scalers", ScalersError)
        self.prometheus_port = 0
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._targets_text: str | None = None
        self._discovery: threading.Thread | None = None

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    def start(self, timeout_s: float = 90.0) -> Scalers:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        t0 = time.monotonic()
        prometheus = prometheus_binary()
        keda = keda_dir()
        self.timings["binaries_s"] = time.monotonic() - t0
        self.dir.mkdir(parents=True, exist_ok=True)
        apply_crds(self.api, keda / "crds", ScalersError)
        self._start_prometheus(prometheus, timeout_s)
        certs = self._certs()
        grpc = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cp.kubeconfig),
            "POD_NAMESPACE": KEDA_NS,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NS,  # else read from a pod's token mount
            "WATCH_NAMESPACE": "",
        }
        health = free_port()
        self.daemons.spawn(
            "keda-operator",
            [
                str(keda / "keda-operator"),
                "--leader-elect=false",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--metrics-service-bind-address=127.0.0.1:{grpc}",
                f"--cert-dir={certs}",
                "--enable-cert-rotation=false",
                "--enable-webhook-patching=false",
                "--enable-apiservice-patching=false",
                # ROLLCHECK_KEDA_LOG=debug: each trigger's value and activity, per poll
                f"--zap-log-level={os.environ.get('ROLLCHECK_KEDA_LOG', 'info')}",
            ],
            env,
        )
        self.daemons.wait(
            lambda: http_get(f"http://127.0.0.1:{health}/readyz", timeout=1).status_code == 200,
            "keda-operator",
            timeout_s,
        )
        port = free_port(self.host_ip)
        kc = str(self.cp.kubeconfig)
        self.daemons.spawn(
            "keda-adapter",
            [
                str(keda / "keda-adapter"),
                f"--secure-port={port}",
                f"--bind-address={self.host_ip}",
                f"--tls-cert-file={certs / 'serving.crt'}",
                f"--tls-private-key-file={certs / 'serving.key'}",
                f"--cert-dir={certs}",
                f"--metrics-service-address=127.0.0.1:{grpc}",
                f"--port={free_port()}",
                f"--lister-kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
            ],
            env,
        )
        self._register_metrics_api(port)
        self.daemons.wait(self._metrics_api_available, "keda-adapter", timeout_s)
        self.timings["start_s"] = time.monotonic() - t0

    # --- parts ---------------------------------------------------------------------
    def _start_prometheus(self, binary: Path, timeout_s: float) -> None:
        self.prometheus_port = free_port()
        config = self.dir / "prometheus.yml"
        self._targets_file = self.dir / "engine-targets.json"
        self._write_targets()
        self._discovery = threading.Thread(target=self._discover, name="prometheus-sd", daemon=True)
        self._discovery.start()
        write_atomic(config, yaml.safe_dump(prometheus_config(self._targets_file)))
        self.daemons.spawn(
            "prometheus",
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'prometheus-data'}",
                "--storage.tsdb.retention.time=2h",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            ],
        )
        self.daemons.wait(
            lambda: http_get(f"{self.prometheus_url}/-/ready", timeout=1).status_code == 200,
            "prometheus",
            timeout_s,
        )

    def _write_targets(self) -> bool:
        pods = client.CoreV1Api(self.api).list_pod_for_all_namespaces().items
        text = json.dumps(engine_targets(pods), indent=1)
        if text == self._targets_text:
            return False
        write_atomic(self._targets_file, text)  # a rename: Prometheus sees it at once
        self._targets_text = text
        return True

    def _discover(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._write_targets()
            except Exception:  # the API server restarting, or going away at the end
                continue

    def _certs(self) -> Path:
        """KEDA's gRPC mutual TLS (ca.crt, tls.crt, tls.key in one folder, as its pods
        mount them) and the metrics API server's serving certificate, for the name the
        aggregation layer verifies (<service>.<namespace>.svc)."""
        pki = self.cp.dir / "pki"
        certs = self.dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        crt, key = serving_cert(
            pki, "keda-grpc", ["keda-operator", f"keda-operator.{KEDA_NS}.svc"], ["127.0.0.1"],
            client_too=True,
        )  # fmt: skip
        shutil.copyfile(crt, certs / "tls.crt")
        shutil.copyfile(key, certs / "tls.key")
        shutil.copyfile(pki / "ca.crt", certs / "ca.crt")
        crt, key = serving_cert(
            pki, "keda-serving", [f"{METRICS_SERVICE}.{KEDA_NS}.svc"], [self.host_ip]
        )
        shutil.copyfile(crt, certs / "serving.crt")
        shutil.copyfile(key, certs / "serving.key")
        for f in certs.glob("*.key"):
            f.chmod(0o600)
        return certs

    def _register_metrics_api(self, port: int) -> None:
        """A Service without a selector whose one endpoint is the adapter on this machine,
        and the APIService that sends external.metrics.k8s.io to it."""
        core = client.CoreV1Api(self.api)
        _create(core.create_namespace, {"metadata": {"name": KEDA_NS}})
        meta = {"name": METRICS_SERVICE, "namespace": KEDA_NS}
        _create(
            lambda body: core.create_namespaced_service(KEDA_NS, body),
            {"metadata": meta, "spec": {"ports": [{"name": "https", "port": 443}]}},
        )
        endpoints = {
            "metadata": meta,
            "subsets": [
                {
                    "addresses": [{"ip": self.host_ip}],
                    "ports": [{"name": "https", "port": port}],
                }
            ],
        }
        try:
            core.create_namespaced_endpoints(KEDA_NS, endpoints)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_endpoints(METRICS_SERVICE, KEDA_NS, endpoints)
        reg = client.ApiregistrationV1Api(self.api)
        ca = base64.b64encode((self.cp.dir / "pki" / "ca.crt").read_bytes()).decode()
        body = {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "service": {"name": METRICS_SERVICE, "namespace": KEDA_NS, "port": 443},
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "caBundle": ca,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
        try:
            reg.create_api_service(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            old = reg.read_api_service(APISERVICE)
            body["metadata"]["resourceVersion"] = old.metadata.resource_version
            reg.replace_api_service(APISERVICE, body)

    def _metrics_api_available(self) -> bool:
        svc = client.ApiregistrationV1Api(self.api).read_api_service(APISERVICE)
        return any(
            c.type == "Available" and c.status == "True" for c in svc.status.conditions or []
        )

    def alive(self) -> dict[str, bool]:
        return self.daemons.alive()

    def tail(self, name: str) -> str:
        return self.daemons.tail(name)

    def stop(self) -> None:
        """Stop the scalers; the API objects they serve go with them (the APIService
        would otherwise answer 503 for external metrics)."""
        self._stop.set()
        if self._discovery is not None:
            self._discovery.join(5)
        if self.api is not None:
            try:
                client.ApiregistrationV1Api(self.api).delete_api_service(APISERVICE)
            except Exception:
                pass
        self.daemons.stop()


def _create(create, body) -> None:
    try:
        create(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
