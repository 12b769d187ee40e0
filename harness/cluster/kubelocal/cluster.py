"""kube-local: a real control plane, a node agent running simulator pods, and an
nginx ingress fed from a Service's EndpointSlices: Kubernetes end to end, on loopback."""

from __future__ import annotations

import threading
from pathlib import Path

from kubernetes import client, config, utils, watch
from kubernetes.client.rest import ApiException

from harness.cluster.kubelocal.agent import NodeAgent, _close_watch
from harness.cluster.kubelocal.controlplane import ControlPlane, ControlPlaneError
from harness.cluster.kubelocal.kubeletlogs import LOG_FILE_ANNOTATION
from harness.cluster.kubelocal.podnet import ConnectProxy, PodNetwork
from harness.cluster.local.nginx import Nginx
from harness.events import EventLog
from harness.proc import free_port

__all__ = ["ControlPlaneError", "EndpointSliceIngress", "KubeLocal"]


class EndpointSliceIngress:
    """nginx routing to the ready endpoints of one Service (watch -> upstreams -> reload)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        service: str,
        run_dir: Path,
        events: EventLog,
        net: PodNetwork,
        delay_s: float = 0.0,
        access_format: str = "rollcheck",
    ):
        self.discovery = client.DiscoveryV1Api(api)
        self.namespace, self.service = namespace, service
        self.events = events
        self.net = net
        self.nginx = Nginx(
            Path(run_dir), free_port(), delay_s, 3600, events.emit, access_format=access_format
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ingress", daemon=True)
        self._current: tuple[str, ...] | None = None

    @property
    def url(self) -> str:
        return self.nginx.url

    def start(self) -> EndpointSliceIngress:
        self.nginx.start()
        self._thread.start()
        return self

    def _watch(self) -> None:
        selector = f"kubernetes.io/service-name={self.service}"
        slices: dict[str, object] = {}
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listed = self.discovery.list_namespaced_endpoint_slice(
                        self.namespace, label_selector=selector
                    )
                    slices = {s.metadata.name: s for s in listed.items}
                    rv = listed.metadata.resource_version
                    self._apply(slices)
                w = self._watch = watch.Watch()
                for ev in w.stream(
                    self.discovery.list_namespaced_endpoint_slice,
                    self.namespace,
                    label_selector=selector,
                    resource_version=rv,
                    timeout_seconds=30,
                ):
                    if self._stop.is_set():
                        w.stop()
                        return
                    if ev["type"] == "ERROR":  # 410 Gone: relist
                        rv = None
                        break
                    s = ev["object"]
                    rv = s.metadata.resource_version
                    if ev["type"] == "DELETED":
                        slices.pop(s.metadata.name, None)
                    else:
                        slices[s.metadata.name] = s
                    self._apply(slices)
            except ApiException as exc:
                rv = None if exc.status == 410 else rv
                self._stop.wait(0.5)
            except Exception:
                if self._stop.is_set():
                    return
                self._stop.wait(0.5)

    def _apply(self, slices: dict) -> None:
        addresses = []
        aliases = {}
        for s in slices.values():
            port = (s.ports or [None])[0]
            for ep in s.endpoints or []:
                if ep.conditions is None or ep.conditions.ready:
                    for a in ep.addresses:
                        local = self.net.local(a)  # only our pods, by their real address
                        if local is not None:
                            p = port.port if port else 8000
                            addresses.append(f"{local}:{p}")
                            aliases[f"{local}:{p}"] = (
                                f"{a}:{p}"  # log the pod IP, as ingress-nginx does
                            )
        endpoints = tuple(sorted(addresses))
        if endpoints != self._current:
            self._current = endpoints
            self.nginx.set_endpoints(list(endpoints), aliases)

    def stop(self) -> None:
        self._stop.set()
        _close_watch(getattr(self, "_watch", None))
        self._thread.join(5)
        self.nginx.stop()


class KubeLocal:
    """The control plane, the node agent and (on demand) an ingress for a Service."""

    def __init__(self, run_dir: Path, nodes: int = 2, gpus_per_node: int = 8):
        self.run_dir = Path(run_dir).resolve()  # components run from other folders
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.net = PodNetwork()
        self.proxy: ConnectProxy | None = None
        self.control_plane = ControlPlane(self.run_dir)
        self.node_names = [f"kube-local-node-{i}" for i in range(nodes)]
        self.gpus = gpus_per_node
        self.events = EventLog(self.run_dir / "node-events.jsonl")
        self.api: client.ApiClient | None = None
        self.agent: NodeAgent | None = None
        self.ingresses: list[EndpointSliceIngress] = []

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def start(self) -> KubeLocal:
        try:
            self.proxy = ConnectProxy(self.net, self.run_dir / "kube" / "podnet.sock")
            self.control_plane.egress_config = self.proxy.egress_config()
            self.control_plane.start()
            self.api = config.new_client_from_config(str(self.kubeconfig))
            pki = self.control_plane.dir / "pki"
            self.agent = NodeAgent(
                self.api,
                self.node_names,
                self.run_dir,
                self.gpus,
                self.events,
                self.net,
                tls=(pki / "apiserver.crt", pki / "apiserver.key"),
            ).start()
        except BaseException:
            self.stop()
            raise
        return self

    def apply(self, path: Path, namespace: str = "default") -> None:
        utils.create_from_yaml(self.api, str(path), namespace=namespace)

    def ingress(
        self,
        service: str,
        namespace: str = "default",
        delay_s: float = 0.0,
        access_format: str = "rollcheck",
    ) -> EndpointSliceIngress:
        ing = EndpointSliceIngress(
            self.api,
            namespace,
            service,
            # Its own folder: nginx.conf, the upstream files and nginx.pid are per ingress.
            # One shared by same-named Services let a stale ingress rewrite and reload
            # another's upstreams.
            self.run_dir / f"ingress-{namespace}-{service}",
            self.events,
            self.net,
            delay_s,
            access_format,
        )
        self.ingresses.append(ing.start())
        return ing

    def ingress_controller_pod(self, ing: EndpointSliceIngress, namespace: str) -> str:
        """A pod standing for ingress-nginx's controller: labelled as ingress-nginx labels
        its pods, its log the ingress's own (the node agent serves it for pods/log). The
        ingress writes ingress-nginx's upstreaminfo format (ingress(access_format=...))."""
        name = f"ingress-nginx-controller-{ing.service}"
        client.CoreV1Api(self.api).create_namespaced_pod(
            namespace,
            {
                "metadata": {
                    "name": name,
                    "labels": {"app.kubernetes.io/name": "ingress-nginx"},
                    "annotations": {LOG_FILE_ANNOTATION: str(ing.nginx.access_log)},
                },
                "spec": {"containers": [{"name": "controller", "image": "rollcheck/sim:v1"}]},
            },
        )
        return name

    def stop_ingresses(self, namespace: str) -> None:
        """Stop the ingresses serving a namespace (before it is deleted)."""
        for ing in [i for i in self.ingresses if i.namespace == namespace]:
            ing.stop()
            self.ingresses.remove(ing)

    def stop(self) -> None:
        for ing in self.ingresses:
            ing.stop()
        if self.agent is not None:
            self.agent.stop()
        self.control_plane.stop()
        if self.proxy is not None:
            self.proxy.stop()
        self.events.close()

    def __enter__(self) -> KubeLocal:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
