"""kube-local: a real control plane, real nodes (containerd and the kubelet, node.py)
running the simulator image (image.py), and an nginx ingress fed from a Service's
EndpointSlices: Kubernetes end to end, on this machine."""

from __future__ import annotations

import sys
import threading
import time
import urllib.parse
from pathlib import Path

from kubernetes import client, config, utils, watch
from kubernetes.client.rest import ApiException

from harness.cluster.kubelocal.controlplane import (
    ControlPlane,
    ControlPlaneError,
    client_cert,
    kubeconfig_text,
)
from harness.cluster.kubelocal.crds import apply_crds, gateway_api_crds
from harness.cluster.kubelocal.gateway import GatewayError, TraefikGateway
from harness.cluster.kubelocal.image import IMAGE, sim_image
from harness.cluster.kubelocal.node import (
    HOST_FOR_PODS,
    Node,
    NodeError,
    check_host,
    clean_leftovers,
    socket_identity,
)
from harness.cluster.kubelocal.scalers import Scalers, ScalersError
from harness.cluster.local.nginx import Nginx
from harness.events import EventLog
from harness.files import write_atomic
from harness.proc import free_port
from harness.waits import wait_until

__all__ = [
    "ControlPlaneError",
    "EndpointSliceIngress",
    "GatewayError",
    "KubeLocal",
    "NodeError",
    "ScalersError",
    "TraefikGateway",
]
GPU = "nvidia.com/gpu"
KUBERNETES_SERVICE = "10.96.0.1"  # the `kubernetes` Service (the API server's certificate names it)


class EndpointSliceIngress:
    """nginx routing to the ready endpoints of one Service (watch -> upstreams -> reload)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        service: str,
        run_dir: Path,
        events: EventLog,
        delay_s: float = 0.0,
        access_format: str = "rollcheck",
        **nginx,
    ):
        """nginx: Nginx's own options (connect_timeout_s, passive_health)."""
        self.discovery = client.DiscoveryV1Api(api)
        self.namespace, self.service = namespace, service
        self.events = events
        self.nginx = Nginx(
            Path(run_dir), free_port(), delay_s, 3600, events.emit, access_format=access_format,
            **nginx,
        )  # fmt: skip
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
        for s in slices.values():
            port = (s.ports or [None])[0]
            for ep in s.endpoints or []:
                if ep.conditions is None or ep.conditions.ready:
                    for a in ep.addresses:
                        addresses.append(f"{a}:{port.port if port else 8000}")
        endpoints = tuple(sorted(addresses))
        if endpoints != self._current:
            self._current = endpoints
            self.nginx.set_endpoints(list(endpoints))

    def stop(self) -> None:
        self._stop.set()
        _close_watch(getattr(self, "_watch", None))
        self._thread.join(5)
        self.nginx.stop()


class KubeLocal:
    """The control plane, real nodes and (on demand) an ingress for a Service."""

    def __init__(
        self, run_dir: Path, nodes: int = 2, gpus_per_node: int = 8, with_scalers: bool = False
    ):
        self.run_dir = Path(run_dir).resolve()  # components run from other folders
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.control_plane = ControlPlane(self.run_dir)
        self.node_names = [f"kube-local-node-{i}" for i in range(nodes)]
        self.gpus = gpus_per_node
        self.events = EventLog(self.run_dir / "node-events.jsonl")
        self.api: client.ApiClient | None = None
        self.nodes: list[Node] = []
        self.ingresses: list[EndpointSliceIngress] = []
        self.gateways: list[TraefikGateway] = []
        self.timings: dict[str, float] = {}
        self.with_scalers = with_scalers
        self.scalers: Scalers | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def kill_command(self) -> list[str]:
        """kube.kill_command for this cluster: the engine container's process signalled
        through its node's containerd (harness/cluster/kubelocal/kill.py)."""
        return [
            sys.executable, "-m", "harness.cluster.kubelocal.kill", str(self.run_dir / "nodes"),
            "{node}", "{container_id}", "{signal}",
        ]  # fmt: skip

    def power_command(self, how: str) -> list[str]:
        """kube.node_loss_command (how: off) or kube.node_return_command (on) for this
        cluster: a node's bridge cut off and its processes frozen, then thawed
        (harness/cluster/kubelocal/power.py)."""
        return [
            sys.executable, "-m", "harness.cluster.kubelocal.power", str(self.run_dir / "nodes"),
            "{node}", how,
        ]  # fmt: skip

    def start(self) -> KubeLocal:
        try:
            check_host()
            clean_leftovers()
            t0 = time.monotonic()
            image = sim_image()
            self.timings["image_s"] = time.monotonic() - t0
            self.control_plane.start()
            self.api = config.new_client_from_config(str(self.kubeconfig))
            self._start_nodes(image)
            if self.with_scalers:
                self.start_scalers()
            self.timings["start_s"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def _start_nodes(self, image: Path) -> None:
        """Every node's containerd, its copy of the image, its kubelet; then Ready and
        advertising its GPUs. The slow steps run side by side; processes are started
        from this thread (they die with it)."""
        pki = self.control_plane.dir / "pki"
        for i, name in enumerate(self.node_names):
            node = Node(
                name,
                self.run_dir / "nodes" / name,
                self.control_plane.bins / "kubelet",
                self.kubeconfig,
                pki / "ca.crt",
                image,
                first_index=1 + i,
            )
            self.nodes.append(node)
            node.start_network()
            node.start_containerd()
        for node in self.nodes:
            node.wait_containerd()
        imports = [(node, node.import_image()) for node in self.nodes]
        for node, proc in imports:
            node.finish_import(proc)
        t = time.monotonic()
        for node in self.nodes:
            crt, key = client_cert(pki, node.name, f"system:node:{node.name}", "system:nodes")
            kubeconfig = node.dir / "kubeconfig"
            write_atomic(
                kubeconfig,
                kubeconfig_text(self.control_plane.server, {"ca.crt": pki / "ca.crt"}, (crt, key)),
            )
            before = socket_identity()
            node.start_kubelet(kubeconfig)
            node.wait_device_plugin_socket(before)  # one at a time: DEVICE_PLUGIN_SOCKET
        self._wait_nodes_ready()
        for node in self.nodes:  # in-cluster clients (the nightly's pod) reach the API
            node.forward_to_host(KUBERNETES_SERVICE, 443, self.control_plane.api_port)
        self.timings["nodes_ready_s"] = time.monotonic() - t

    def load_image(self, image: Path) -> None:
        """Another image (a docker-archive tar, image.runner_image) on every node, as a
        registry would serve it."""
        imports = [(node, node.import_image(image)) for node in self.nodes]
        for node, proc in imports:
            node.finish_import(proc, timeout_s=300)

    def expose_to_pods(self, url: str) -> str:
        """A URL on this machine's loopback (an ingress, Prometheus) as pods reach it."""
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or 80
        for node in self.nodes:
            node.forward_to_host(HOST_FOR_PODS, port, port)
        return parsed._replace(netloc=f"{HOST_FOR_PODS}:{port}").geturl()

    def _wait_nodes_ready(self, timeout_s: float = 90) -> None:
        core = client.CoreV1Api(self.api)
        advertised: set[str] = set()

        def ready() -> bool:
            nodes = {n.metadata.name: n for n in core.list_node().items}
            for name in self.node_names:
                n = nodes.get(name)
                if n is None or not _is_ready(n):
                    return False
                if name not in advertised:  # extended resources, as a device plugin would
                    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu",
                              "value": str(self.gpus)}]  # fmt: skip
                    core.patch_node_status(name, patch)
                    advertised.add(name)
                if (n.status.allocatable or {}).get(GPU) != str(self.gpus):
                    return False
            return True

        def alive() -> None:
            for node in self.nodes:
                for pname, up in node.alive().items():
                    if not up:
                        raise NodeError(f"{node.name}: {pname} exited: {node._tail(pname)}")

        wait_until(
            ready,
            timeout_s,
            "every node Ready with its GPUs",
            interval_s=0.2,
            error=lambda msg: NodeError(
                f"{msg}: {'; '.join(n.name + ': ' + n._tail('kubelet') for n in self.nodes)}"
            ),
            alive=alive,
        )

    def start_scalers(self) -> Scalers:
        """Prometheus, KEDA's operator and its metrics API server (scalers.py): the HPA
        controller then reads KEDA's external metrics, as on a cluster."""
        if self.scalers is None:
            self.scalers = Scalers(self.control_plane, self.api, self.nodes[0].ip).start()
        return self.scalers

    def stop_scalers(self) -> None:
        if self.scalers is not None:
            self.scalers.stop()
            self.scalers = None

    def apply(self, path: Path, namespace: str = "default") -> None:
        utils.create_from_yaml(self.api, str(path), namespace=namespace)

    def apply_objects(self, objs: list[dict], namespace: str = "default") -> None:
        for obj in objs:
            utils.create_from_dict(self.api, obj, namespace=namespace)

    def ingress(
        self,
        service: str,
        namespace: str = "default",
        delay_s: float = 0.0,
        access_format: str = "rollcheck",
        **nginx,
    ) -> EndpointSliceIngress:
        """nginx: the gateway's options (Nginx: connect_timeout_s, passive_health)."""
        ing = EndpointSliceIngress(
            self.api,
            namespace,
            service,
            # Its own folder: nginx.conf, the upstream files and nginx.pid are per ingress.
            # One shared by same-named Services let a stale ingress rewrite and reload
            # another's upstreams.
            self.run_dir / f"ingress-{namespace}-{service}",
            self.events,
            delay_s,
            access_format,
            **nginx,
        )
        self.ingresses.append(ing.start())
        return ing

    def gateway(self, namespace: str) -> TraefikGateway:
        """A Gateway API implementation (Traefik) serving the namespace's HTTPRoutes through
        its Gateway `inference-gateway`; the Gateway API's CRDs applied first."""
        self.gateway_api()
        gw = TraefikGateway(
            self.api, self.kubeconfig, namespace, self.run_dir / f"gateway-{namespace}"
        )
        try:
            gw.start()
        except BaseException:
            gw.stop()
            raise
        self.gateways.append(gw)
        return gw

    def gateway_api(self) -> None:
        """The Gateway API's standard CRDs, applied and served (once established)."""
        names = apply_crds(self.api, gateway_api_crds(GatewayError), GatewayError)
        ext = client.ApiextensionsV1Api(self.api)

        def established() -> bool:
            return all(
                any(
                    c.type == "Established" and c.status == "True"
                    for c in ext.read_custom_resource_definition(n).status.conditions or []
                )
                for n in names
            )

        wait_until(
            established,
            30,
            "the Gateway API's CRDs to be established",
            interval_s=0.1,
            error=GatewayError,
        )

    def ingress_controller_pod(
        self, ing: EndpointSliceIngress, namespace: str, shutdown_manager: bool = False
    ) -> str:
        """A pod standing for ingress-nginx's controller: labelled as ingress-nginx labels
        its pods, and its container follows the ingress's access log (mounted from this
        machine), so its log through pods/log is the ingress's own, as on a cluster. The
        ingress writes ingress-nginx's upstreaminfo format (ingress(access_format=...)).
        shutdown_manager: a second container listed first, as Envoy Gateway's pods have,
        so that the pod's log must be read by container."""
        name = f"ingress-nginx-controller-{ing.service}"
        log = Path(ing.nginx.access_log).resolve()
        client.CoreV1Api(self.api).create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "ingress-nginx"}},
                "spec": {
                    "dnsPolicy": "Default",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        *(
                            [
                                {
                                    "name": "shutdown-manager",
                                    "image": f"{IMAGE}:v1",
                                    "command": ["sleep", "infinity"],
                                }
                            ]
                            if shutdown_manager
                            else []
                        ),
                        {
                            "name": "controller",
                            "image": f"{IMAGE}:v1",
                            "command": ["tail", "-n", "+1", "-F", f"/var/log/ingress/{log.name}"],
                            "volumeMounts": [{"name": "log", "mountPath": "/var/log/ingress"}],
                        },
                    ],
                    "volumes": [{"name": "log", "hostPath": {"path": str(log.parent)}}],
                },
            },
        )
        return name

    def stop_ingresses(self, namespace: str) -> None:
        """Stop the ingresses serving a namespace (before it is deleted)."""
        for ing in [i for i in self.ingresses if i.namespace == namespace]:
            ing.stop()
            self.ingresses.remove(ing)
        for gw in [g for g in self.gateways if g.namespace == namespace]:
            gw.stop()
            self.gateways.remove(gw)

    def stop(self) -> None:
        for ing in self.ingresses:
            ing.stop()
        for gw in self.gateways:
            gw.stop()
        self.stop_scalers()
        for node in self.nodes:
            try:
                node.stop()
            except Exception as exc:  # one node's trouble must not keep the others running
                self.events.emit("node_stop_failed", node=node.name, error=str(exc))
        self.control_plane.stop()
        self.events.close()

    def __enter__(self) -> KubeLocal:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _is_ready(obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (obj.status.conditions or []))


def _close_watch(w) -> None:
    """End a watch stream now (its thread would otherwise block until the server's timeout);
    Watch.stop() shuts the socket down, which unblocks the read."""
    if w is not None:
        w.stop()
