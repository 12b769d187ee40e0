"""A real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built from Go modules (scripts/build-kube).

Certificates and service-account keys are made per run; every component listens
on 127.0.0.1 on a free port; the admin kubeconfig is written to the run folder.
Flags follow kwok's `--runtime=binary` component setup.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import time
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness.client import http_get
from harness.cluster.local.kubelet import die_with_parent
from harness.errors import RollcheckError
from harness.files import open_append, write_atomic
from harness.proc import PidFile, free_port, reap_leftovers, stop_group
from harness.waits import wait_until

ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = ROOT / "scripts" / "build-kube"


class ControlPlaneError(RollcheckError, RuntimeError):
    """The control plane could not be built or started: one clear line."""


def binaries_dir() -> Path:
    """The cached binaries, built on first use (tens of minutes once, then instant)."""
    env_dir = os.environ.get("ROLLCHECK_KUBE_BIN")
    if env_dir:
        return Path(env_dir)
    r = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ControlPlaneError(f"building the control plane failed (bash {BUILD_SCRIPT}): {last}")
    return Path(r.stdout.strip().splitlines()[-1])


# --- certificates ----------------------------------------------------------------
def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(subject, issuer, pub, sign_key, *, ca=False, sans=None, client=False):
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(pub)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        usage = x509.oid.ExtendedKeyUsageOID
        b = b.add_extension(
            x509.ExtendedKeyUsage([usage.CLIENT_AUTH if client else usage.SERVER_AUTH]),
            critical=False,
        )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(sign_key, hashes.SHA256())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("rollcheck-local-ca")
    ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    files: dict[str, Path] = {}

    def write(name: str, data: bytes) -> None:
        files[name] = folder / name
        write_atomic(files[name], data)
        files[name].chmod(0o600)

    write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    write("ca.key", _pem_key(ca_key))
    server_key = _key()
    sans = [
        x509.DNSName(n)
        for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.96.0.1")]
    server = _cert(_name("kube-apiserver"), ca_name, server_key.public_key(), ca_key, sans=sans)
    write("apiserver.crt", server.public_bytes(serialization.Encoding.PEM))
    write("apiserver.key", _pem_key(server_key))
    admin_key = _key()
    admin = _cert(
        _name("rollcheck-admin", "system:masters"),
        ca_name,
        admin_key.public_key(),
        ca_key,
        client=True,
    )
    write("admin.crt", admin.public_bytes(serialization.Encoding.PEM))
    write("admin.key", _pem_key(admin_key))
    sa_key = _key()
    write("sa.key", _pem_key(sa_key))
    write(
        "sa.pub",
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return files


def client_cert(folder: Path, name: str, cn: str, org: str) -> tuple[Path, Path]:
    """A client certificate signed by the run's CA (a kubelet's: system:node:<name>)."""
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    key = _key()
    cert = _cert(_name(cn, org), ca.subject, key.public_key(), ca_key, client=True)
    crt, pem = folder / f"{name}.crt", folder / f"{name}.key"
    write_atomic(crt, cert.public_bytes(serialization.Encoding.PEM))
    write_atomic(pem, _pem_key(key))
    pem.chmod(0o600)
    return crt, pem


def kubeconfig_text(
    server: str, pki: dict[str, Path], user: tuple[Path, Path] | None = None
) -> str:
    crt, key = user or (pki["admin.crt"], pki["admin.key"])
    return f"""apiVersion: v1
kind: Config
clusters:
- name: rollcheck-local
  cluster:
    server: {server}
    certificate-authority: {pki["ca.crt"]}
users:
- name: admin
  user:
    client-certificate: {crt}
    client-key: {key}
contexts:
- name: rollcheck-local
  context: {{cluster: rollcheck-local, user: admin}}
current-context: rollcheck-local
"""


def spawn_logged(log_path: Path, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    """A daemon of kube-local: its own process group, its output in a log file started
    afresh, and SIGKILL if the thread that started it dies (the harness was killed)."""
    log = open_append(log_path, binary=True, truncate=True)
    try:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    finally:
        log.close()


# --- the control plane -----------------------------------------------------------------
class ControlPlane:
    def __init__(self, run_dir: Path, bin_dir: Path | None = None):
        self.dir = Path(run_dir) / "kube"
        self.bin_dir = bin_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.pidfile = PidFile("kube-local")
        self.api_port = 0
        self.kubeconfig = self.dir / "kubeconfig"
        self.timings: dict[str, float] = {}
        self.bins: Path | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def start(self, timeout_s: float = 90.0) -> ControlPlane:
        reap_leftovers()
        t0 = time.monotonic()
        bins = self.bins = self.bin_dir or binaries_dir()
        self.timings["binaries_s"] = time.monotonic() - t0
        self.dir.mkdir(parents=True, exist_ok=True)
        pki = make_pki(self.dir / "pki")
        write_atomic(self.kubeconfig, kubeconfig_text("https://127.0.0.1:0", pki))
        etcd_client, etcd_peer = free_port(), free_port()
        self.api_port = free_port()
        write_atomic(self.kubeconfig, kubeconfig_text(self.server, pki))
        t1 = time.monotonic()
        self._spawn(
            "etcd",
            [
                str(bins / "etcd"),
                "--name",
                "rollcheck",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"rollcheck=http://127.0.0.1:{etcd_peer}",
                "--quota-backend-bytes",
                str(2 * 1024**3),
                "--unsafe-no-fsync",
            ],
        )
        self._wait(
            lambda: (
                http_get(f"http://127.0.0.1:{etcd_client}/health", timeout=1).status_code == 200
            ),
            "etcd",
            timeout_s,
        )
        self._spawn(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                "--etcd-servers",
                f"http://127.0.0.1:{etcd_client}",
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(self.api_port),
                "--tls-cert-file",
                str(pki["apiserver.crt"]),
                "--tls-private-key-file",
                str(pki["apiserver.key"]),
                "--client-ca-file",
                str(pki["ca.crt"]),
                "--service-account-key-file",
                str(pki["sa.pub"]),
                "--service-account-signing-key-file",
                str(pki["sa.key"]),
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--authorization-mode",
                "Node,RBAC",
                "--service-cluster-ip-range",
                "10.96.0.0/16",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type",
                "none",
                # pods/log, exec and the pods proxy: the kubelet at the node's InternalIP
                "--kubelet-preferred-address-types",
                "InternalIP",
                "--kubelet-client-certificate",
                str(pki["admin.crt"]),
                "--kubelet-client-key",
                str(pki["admin.key"]),
            ],
        )
        # one TLS context for every poll: building one loads certificates (harness.client)
        admin_tls = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        admin_tls.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))
        self._wait(lambda: self._api_ready(admin_tls), "kube-apiserver", timeout_s)
        self.timings["api_ready_s"] = time.monotonic() - t1

        # Both controllers serve on loopback and authenticate callers with the admin config.
        def common() -> list[str]:
            kc = str(self.kubeconfig)
            return [
                "--kubeconfig",
                kc,
                "--leader-elect=false",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(free_port()),
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
            ]

        self._spawn(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                *common(),
                "--service-account-private-key-file",
                str(pki["sa.key"]),
                "--root-ca-file",
                str(pki["ca.crt"]),
                "--use-service-account-credentials=false",
                "--controllers",
                "*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                "--node-monitor-grace-period",
                "40s",
                "--concurrent-deployment-syncs",
                "5",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                *common(),
            ],
        )
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def _spawn(self, name: str, cmd: list[str]) -> None:
        proc = self.procs[name] = spawn_logged(self.dir / f"{name}.log", cmd)
        self.pidfile.remember(name, proc.pid)

    def _api_ready(self, tls: ssl.SSLContext) -> bool:
        return httpx.get(f"{self.server}/readyz", timeout=2, verify=tls).status_code == 200

    def _wait(self, ready, name: str, timeout_s: float) -> None:
        def none_exited():
            for pname, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{pname} exited with code {proc.returncode}: {self._tail(pname)}"
                    )

        def is_ready() -> bool:
            try:
                return ready()
            except httpx.HTTPError:
                return False

        wait_until(
            is_ready,
            timeout_s,
            f"{name} to be ready",
            interval_s=0.1,
            error=lambda msg: ControlPlaneError(f"{msg}: {self._tail(name)}"),
            alive=none_exited,
        )

    def _tail(self, name: str) -> str:
        try:
            lines = (self.dir / f"{name}.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1][:300] if lines else "(empty log)"

    def alive(self) -> dict[str, bool]:
        return {n: p.poll() is None for n, p in self.procs.items()}

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            stop_group(self.procs[name], signal.SIGTERM, 5)
        self.pidfile.clear()
