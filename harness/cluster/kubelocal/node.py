"""One kube-local node: a containerd and a real kubelet, on a bridge of its own.

Each node has its own folder (containerd's root and state, runc's root, the kubelet's
root, pod logs, CNI configuration and IP leases), its own bridge `rollcheckN` with the
pod subnet 10.244.N.0/24 whose gateway address is the node's IP, and its own ports.
Pods get no default route, and iptables drops whatever would be forwarded into or out
of the bridge, so pod traffic stays between the pods and this machine. containerd
reaches registries only through a proxy address that refuses every connection: a pull
of an image that was not imported fails on the node (ErrImagePull), as on a cluster
that cannot reach its registry, and nothing leaves the machine.

What the machine forces (docs/facts.md): cgroup v1 (`failCgroupV1: false`,
`cgroupsPerQOS: false`, `cgroupDriver: cgroupfs`), no CAP_SYS_RESOURCE
(`restrict_oom_score_adj`, `oomScoreAdj: 0`), and a node IP that is not loopback.

What a node creates is written down before it is created (Leftovers), so a kube-local
killed with SIGKILL is cleaned up by the next start: processes, containers, mounts,
network namespaces, the bridge and the iptables rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from harness.cluster.kubelocal.daemons import spawn_logged
from harness.cluster.kubelocal.power import _bundles, _shims, _start_time, power_on, power_rules
from harness.errors import RollcheckError
from harness.files import open_append, write_atomic
from harness.proc import PID_DIR, pid_alive, stop_group
from harness.waits import wait_until

CNI_BIN = Path("/usr/lib/cni")
# The device manager's socket: the one kubelet path outside --root-dir that every kubelet
# on this machine binds (the kubelet's own constant). Each empties the folder, then
# listens: two started together both emptied it and the second's bind failed ("bind:
# address already in use", seen in CI), so a node's kubelet is started once the one
# before it has bound its socket.
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
SOCKETS = Path("/run/rollcheck")
SUBNET = "10.244.{index}"
BRIDGE = "rollcheck{index}"
NO_REGISTRY = "http://127.0.0.1:9"  # the discard port: nothing listens, every pull fails here
NEEDS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
}


class NodeError(RollcheckError, RuntimeError):
    """A node could not be set up: one line."""


def missing_parts() -> list[str]:
    """The Debian packages a real node needs that this machine lacks."""
    missing = {pkg for cmd, pkg in NEEDS.items() if shutil.which(cmd) is None}
    if not (CNI_BIN / "bridge").exists() or not (CNI_BIN / "host-local").exists():
        missing.add("containernetworking-plugins")
    return sorted(missing)


def check_host() -> None:
    missing = missing_parts()
    if os.geteuid() != 0:
        raise NodeError(
            "kube-local runs real kubelets, which need root (containers, bridges, iptables); "
            "run it as root, or use the local target (--target local)"
        )
    if missing:
        raise NodeError(
            f"kube-local needs {', '.join(missing)}: install with "
            f"apt-get install -y {' '.join(missing)} (scripts/run test does this as root)"
        )


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NodeError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[-300:]}")
    return r


# Routed from every pod through its node: the Services' range (10.96.0.0/16, where the
# `kubernetes` Service's 10.96.0.1:443 reaches the API server) and HOST_FOR_PODS.
SERVICE_ROUTE = "10.96.0.0/15"
HOST_FOR_PODS = "10.97.0.1"  # this machine's loopback ports, as pods reach them


# --- what a node leaves behind -------------------------------------------------------
class Leftovers:
    """A node's bridge, rules, folder and processes, written before they exist: the next
    start cleans up after a kube-local that was killed."""

    def __init__(self, node: str):
        self.path = PID_DIR / f"kube-node-{os.getpid()}-{node}.json"
        self.record: dict = {"owner": os.getpid(), "node": node, "pids": {}}

    def note(self, **items) -> None:
        self.record.update(items)
        PID_DIR.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.record))

    def pid(self, name: str, pid: int) -> None:
        self.note(pids=self.record["pids"] | {name: pid})

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def clean_leftovers() -> list[str]:
    """Clean up every node whose kube-local died without stopping it; what was cleaned."""
    cleaned = []
    for path in sorted(PID_DIR.glob("kube-node-*.json")) if PID_DIR.exists() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if pid_alive(record.get("owner", 0)):
            continue
        teardown(record)
        path.unlink(missing_ok=True)
        cleaned.append(record.get("node", "?"))
    return cleaned


def _kill_recorded(pid: int, start_time: str | None) -> None:
    """SIGKILL a recorded process if it is still the same process (its start time)."""
    if pid and start_time and _start_time(pid) == start_time:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _shim_sockets(state: Path) -> list[Path]:
    sockets = []
    for bundle in _bundles(state):
        try:
            address = (bundle / "address").read_text().strip()
        except OSError:
            continue
        if address.startswith("unix://"):
            sockets.append(Path(address[len("unix://") :]))
    return sockets


def _mounts_under(folder: str) -> list[str]:
    points = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return points
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point == folder or point.startswith(folder + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)  # the deepest first


def teardown(record: dict) -> None:
    """Undo what a node made: containers, shims, processes, mounts, the bridge, rules."""
    folder = record.get("dir")
    sockets: list[Path] = []
    if folder:
        state = Path(folder) / "state"
        shims = _shims(state)  # found through the containers: before they are killed
        sockets = _shim_sockets(state)
        for pid in [*_container_pids(Path(folder) / "runc"), *shims]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid, start in record.get("pids", {}).values():
        _kill_recorded(pid, start)
    folders = [f for f in (folder, record.get("sockets")) if f]
    deadline = time.monotonic() + 5
    while folders and time.monotonic() < deadline:
        points = [p for f in folders for p in _mounts_under(f)]
        if not points:
            break
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True)
    if folder:
        _remove_container_links(folder)
    for path in sockets:  # containerd keeps shim sockets in /run/containerd/s (fixed)
        path.unlink(missing_ok=True)
    if record.get("sockets"):
        shutil.rmtree(record["sockets"], ignore_errors=True)
    bridge = record.get("bridge")
    # and a power loss's (power.py), made by another process: not in the record
    for rule in record.get("rules", []) + (power_rules(bridge) if bridge else []):
        while _run("iptables", "-w", "-D", *rule, check=False).returncode == 0:
            pass
    if bridge:
        _run("ip", "link", "del", bridge, check=False)


def _container_pids(runc_root: Path) -> list[int]:
    pids = []
    for state in runc_root.glob("*/*/state.json"):  # runc's root, then the namespace
        try:
            pids.append(int(json.loads(state.read_text())["init_process_pid"]))
        except (OSError, ValueError, KeyError):
            continue
    return pids


def _remove_container_links(folder: str) -> None:
    """The kubelet links each container's log into /var/log/containers (a fixed path)."""
    logs = Path("/var/log/containers")
    for link in logs.glob("*.log") if logs.exists() else []:
        try:
            if os.readlink(link).startswith(folder + "/"):
                link.unlink()
        except OSError:
            continue


def _claim_index(wanted: int) -> int:
    """The first bridge index from `wanted` on that no bridge on this machine uses."""
    index = wanted
    while True:
        r = _run("ip", "link", "add", BRIDGE.format(index=index), "type", "bridge", check=False)
        if r.returncode == 0:
            return index
        if "File exists" not in r.stderr:
            raise NodeError(f"ip link add {BRIDGE.format(index=index)} failed: {r.stderr.strip()}")
        index += 1
        if index > 250:
            raise NodeError("no free pod subnet: 250 rollcheck bridges exist on this machine")


# --- the node ----------------------------------------------------------------------
def sockets_of(folder: Path) -> Path:
    """A node's containerd sockets: a short path (a socket's path has at most 107 bytes,
    and run folders under pytest's tmp_path are long), named after the node's folder."""
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:12]
    return SOCKETS / digest


class Node:
    def __init__(
        self,
        name: str,
        folder: Path,
        kubelet: Path,
        kubeconfig: Path,
        ca: Path,
        image: Path,
        first_index: int = 1,
    ):
        self.name = name
        self.dir = Path(folder)
        self.kubelet_bin = kubelet
        self.kubeconfig = kubeconfig
        self.ca = ca
        self.image = image
        self.first_index = first_index
        self.index = 0
        self.procs: dict[str, subprocess.Popen] = {}
        self.left = Leftovers(name)
        self.kubelet_port = 0

    @property
    def bridge(self) -> str:
        return BRIDGE.format(index=self.index)

    @property
    def ip(self) -> str:
        return SUBNET.format(index=self.index) + ".1"

    @property
    def sockets(self) -> Path:
        return sockets_of(self.dir)

    @property
    def socket(self) -> Path:
        return self.sockets / "containerd.sock"

    def kill_container(self, container_id: str, sig: str = "SIGKILL") -> None:
        """Signal a container's process through this node's containerd, as Chaos Mesh's
        container-kill does through its daemon: the kubelet sees it exit and restarts
        it (kube.kill_command on kube-local, KubeLocal.kill_command)."""
        _run("ctr", "--address", str(self.socket), "-n", "k8s.io", "task", "kill", "-s", sig,
             container_id)  # fmt: skip

    def start_network(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.left.note(dir=str(self.dir.resolve()), sockets=str(self.sockets))
        self.sockets.mkdir(parents=True, exist_ok=True)
        self.index = _claim_index(self.first_index)
        rules = [
            ["FORWARD", "-i", self.bridge, "!", "-o", self.bridge, "-j", "DROP"],
            ["FORWARD", "-o", self.bridge, "!", "-i", self.bridge, "-j", "DROP"],
        ]
        self.left.note(bridge=self.bridge, rules=rules)
        # A MAC of its own: a bridge without one takes the lowest MAC of its ports, so
        # it changed whenever a pod left, and the other pods' replies went to the old
        # gateway MAC until ARP caught up: every stream on the node stalled 1.5 s.
        _run("ip", "link", "set", self.bridge, "address", f"02:72:63:6b:00:{self.index:02x}")
        _run("ip", "addr", "add", f"{self.ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for rule in rules:
            _run("iptables", "-w", "-I", *rule)

    def forward_to_host(self, address: str, port: int, host_port: int) -> None:
        """Pods' connections to address:port reach 127.0.0.1:host_port on this machine, as
        kube-proxy's DNAT takes a Service's address to its endpoints (route_localnet lets
        the bridge's packets be sent to loopback). Undone with the bridge."""
        rule = ["PREROUTING", "-t", "nat", "-i", self.bridge, "-d", address, "-p", "tcp"]
        rule += ["--dport", str(port), "-j", "DNAT", "--to-destination", f"127.0.0.1:{host_port}"]
        self.left.note(rules=[*self.left.record.get("rules", []), rule])
        _run("sysctl", "-qw", f"net.ipv4.conf.{self.bridge}.route_localnet=1")
        _run("iptables", "-w", "-I", *rule)

    def start_containerd(self) -> None:
        write_atomic(self.dir / "containerd.toml", self._containerd_config())
        cni = self.dir / "cni"
        cni.mkdir(exist_ok=True)
        write_atomic(cni / "10-rollcheck.conflist", self._cni_config())
        env = dict(os.environ, HTTPS_PROXY=NO_REGISTRY, HTTP_PROXY=NO_REGISTRY, NO_PROXY="")
        env.pop("no_proxy", None)
        self._spawn(
            "containerd", ["containerd", "--config", str(self.dir / "containerd.toml")], env
        )

    def wait_containerd(self, timeout_s: float = 30) -> None:
        def up() -> bool:
            r = subprocess.run(
                ["ctr", "--address", str(self.socket), "version"], capture_output=True
            )
            return r.returncode == 0

        self._wait(up, "containerd", timeout_s)

    def import_image(self, image: Path | None = None) -> subprocess.Popen:
        """`ctr images import` of the simulator image (or another docker-archive)."""
        log = open_append(self.dir / "import.log", binary=True, truncate=True)
        proc = subprocess.Popen(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import",
             "--no-unpack=false", str(image or self.image)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        return proc

    def finish_import(self, proc: subprocess.Popen, timeout_s: float = 120) -> None:
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -1
        if code != 0:
            raise NodeError(
                f"importing an image into {self.name}'s containerd failed: {self._tail('import')}"
            )

    def start_kubelet(self, kubeconfig: Path) -> None:
        from harness.proc import free_port

        self.kubelet_port = free_port()
        root = self.sockets / "kubelet"  # its plugin sockets live in it: a short path too
        root.mkdir(exist_ok=True)
        write_atomic(self.dir / "resolv.conf", "")
        write_atomic(self.dir / "kubelet.yaml", self._kubelet_config(free_port()))
        self._spawn(
            "kubelet",
            [
                str(self.kubelet_bin),
                "--config",
                str(self.dir / "kubelet.yaml"),
                "--kubeconfig",
                str(kubeconfig),
                "--root-dir",
                str(root),
                "--cert-dir",
                str(self.dir / "pki"),
                "--hostname-override",
                self.name,
                "--node-ip",
                self.ip,
                "--node-labels",
                "rollcheck.io/kube-local=true",
            ],
        )

    def wait_device_plugin_socket(self, before: tuple[int, int] | None, timeout_s=60) -> None:
        """Until this node's kubelet has made the shared device-plugin socket anew (not the
        file `before`, the one there when it started: see DEVICE_PLUGIN_SOCKET)."""

        def bound() -> bool:
            now = socket_identity()
            if now is None or now == before:
                return False
            with socket.socket(socket.AF_UNIX) as s:
                return s.connect_ex(str(DEVICE_PLUGIN_SOCKET)) == 0

        self._wait(bound, "kubelet", timeout_s)

    def _spawn(self, name: str, cmd: list[str], env: dict | None = None) -> None:
        proc = self.procs[name] = spawn_logged(self.dir / f"{name}.log", cmd, env)
        self.left.pid(name, [proc.pid, _start_time(proc.pid)])

    def _wait(self, ready, name: str, timeout_s: float) -> None:
        def none_exited() -> None:
            for pname, proc in self.procs.items():
                if proc.poll() is not None:
                    raise NodeError(
                        f"{self.name}: {pname} exited with code {proc.returncode}: "
                        f"{self._tail(pname)}"
                    )

        wait_until(
            ready,
            timeout_s,
            f"{self.name}'s {name}",
            interval_s=0.1,
            error=lambda msg: NodeError(f"{msg}: {self._tail(name)}"),
            alive=none_exited,
        )

    def _tail(self, name: str) -> str:
        try:
            lines = (self.dir / f"{name}.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        errors = [ln for ln in lines if ln.startswith("E") or "level=error" in ln or "fatal" in ln]
        return ((errors or lines or ["(empty log)"])[-1])[:400]

    def alive(self) -> dict[str, bool]:
        return {n: p.poll() is None for n, p in self.procs.items()}

    def stop(self) -> None:
        """Stop the kubelet, then every container and containerd; undo the network."""
        if self.left.record.get("dir"):
            power_on(self.left.record)  # a node left powered off stops like any other
        kubelet = self.procs.get("kubelet")
        if kubelet is not None:
            stop_group(kubelet, signal.SIGTERM, 10)
        self.left.record["pids"].pop("kubelet", None)
        self.left.record["pids"].pop("containerd", None)
        containerd = self.procs.get("containerd")
        teardown(self.left.record)  # containers and shims first: they outlive containerd
        if containerd is not None:
            stop_group(containerd, signal.SIGTERM, 10)
        teardown(self.left.record)
        self.left.clear()

    # --- configuration ----------------------------------------------------------------
    def _containerd_config(self) -> str:
        d = self.dir.resolve()
        return f"""version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/rollcheck/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  tolerate_missing_hugetlb_controller = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d}/cni"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"""

    def _cni_config(self) -> str:
        net = SUBNET.format(index=self.index)
        return json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": f"rollcheck-{self.name}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": self.bridge,
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": f"{net}.0/24", "gateway": self.ip}]],
                            # no default route: pods reach their bridge, the Services'
                            # range and this machine's ports for pods (forward_to_host)
                            "routes": [{"dst": SERVICE_ROUTE}],
                            "dataDir": str(self.dir.resolve() / "ipam"),
                        },
                    },
                    {"type": "loopback"},
                ],
            },
            indent=1,
        )

    def _kubelet_config(self, healthz_port: int) -> str:
        d = self.dir.resolve()
        return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {self.ip}
port: {self.kubelet_port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
containerRuntimeEndpoint: unix://{self.socket}
imageServiceEndpoint: unix://{self.socket}
podLogsDir: {d}/pod-logs
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
resolvConf: {d}/resolv.conf
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 5s
fileCheckFrequency: 20s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 50Mi, nodefs.available: "1%", imagefs.available: "1%"}}
evictionPressureTransitionPeriod: 5s
maxPods: 110
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {self.ca}}}
authorization:
  mode: Webhook
shutdownGracePeriod: 0s
"""


def socket_identity() -> tuple[int, int] | None:
    """The device-plugin socket file's inode and change time, None while there is none."""
    try:
        st = DEVICE_PLUGIN_SOCKET.stat()
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns
