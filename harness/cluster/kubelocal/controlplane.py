"""A real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built from Go modules (scripts/build-kube).

Certificates and service-account keys are made per run; every component listens
on 127.0.0.1 on a free port; the admin kubeconfig is written to the run folder.
Flags follow kwok's `--runtime=binary` component setup.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness.client import http_get
from harness.cluster.kubelocal.daemons import Daemons, built
from harness.errors import RollcheckError
from harness.files import write_atomic
from harness.proc import free_port, reap_leftovers

ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = ROOT / "scripts" / "build-kube"


class ControlPlaneError(RollcheckError, RuntimeError):
    """The control plane could not be built or started: one clear line."""


def binaries_dir() -> Path:
    """The cached binaries, built on first use (tens of minutes once, then instant)."""
    return built(
        BUILD_SCRIPT,
        "ROLLCHECK_KUBE_BIN",
        lambda line: ControlPlaneError(f"building the control plane failed ({line})"),
    )


# --- certificates ----------------------------------------------------------------
def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(subject, issuer, pub, sign_key, *, ca=False, sans=None, client=False, both=False):
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
        usages = [usage.CLIENT_AUTH if client else usage.SERVER_AUTH]
        if both:  # mutual TLS with one certificate (KEDA's operator and adapter)
            usages = [usage.SERVER_AUTH, usage.CLIENT_AUTH]
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
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
    # the aggregation layer's client certificate: the API server proxies to extension API
    # servers (KEDA's metrics API server) as this name, with the caller in X-Remote-User
    proxy_key = _key()
    proxy = _cert(_name("front-proxy-client"), ca_name, proxy_key.public_key(), ca_key, client=True)
    write("front-proxy.crt", proxy.public_bytes(serialization.Encoding.PEM))
    write("front-proxy.key", _pem_key(proxy_key))
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


def serving_cert(
    folder: Path, name: str, dns: list[str], ips: list[str], client_too: bool = False
) -> tuple[Path, Path]:
    """A server certificate signed by the run's CA for these names and addresses (with
    client_too, also a client one: mutual TLS with one certificate)."""
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    key = _key()
    sans = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    cert = _cert(
        _name(dns[0] if dns else name), ca.subject, key.public_key(), ca_key, sans=sans,
        both=client_too,
    )  # fmt: skip
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


# --- the control plane -----------------------------------------------------------------
class ControlPlane:
    def __init__(self, run_dir: Path, bin_dir: Path | None = None):
        self.dir = Path(run_dir) / "kube"
        self.bin_dir = bin_dir
        self.daemons = Daemons(self.dir, "kube-local", ControlPlaneError)
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
        self.daemons.spawn("etcd", etcd_args(bins, self.dir / "etcd", etcd_client, etcd_peer))
        self.daemons.wait(
            lambda: (
                http_get(f"http://127.0.0.1:{etcd_client}/health", timeout=1).status_code == 200
            ),
            "etcd",
            timeout_s,
        )
        self.daemons.spawn("kube-apiserver", apiserver_args(bins, pki, etcd_client, self.api_port))
        # one TLS context for every poll: building one loads certificates (harness.client)
        admin_tls = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        admin_tls.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))
        self.daemons.wait(lambda: self._api_ready(admin_tls), "kube-apiserver", timeout_s)
        self.timings["api_ready_s"] = time.monotonic() - t1
        self.daemons.spawn(
            "kube-controller-manager", controller_manager_args(bins, pki, self.kubeconfig)
        )
        self.daemons.spawn(
            "kube-scheduler",
            [str(bins / "kube-scheduler"), *controller_common(self.kubeconfig)],
        )
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def _api_ready(self, tls: ssl.SSLContext) -> bool:
        return httpx.get(f"{self.server}/readyz", timeout=2, verify=tls).status_code == 200

    def tail(self, name: str) -> str:
        return self.daemons.tail(name)

    def alive(self) -> dict[str, bool]:
        return self.daemons.alive()

    def stop(self) -> None:
        self.daemons.stop()


# --- the control plane's command lines ---------------------------------------------------


def etcd_args(bins: Path, data_dir: Path, etcd_client: int, etcd_peer: int) -> list[str]:
    return [
        str(bins / "etcd"),
        "--name",
        "rollcheck",
        "--data-dir",
        str(data_dir),
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
    ]


def apiserver_args(bins: Path, pki: dict, etcd_client: int, api_port: int) -> list[str]:
    return [
        str(bins / "kube-apiserver"),
        "--etcd-servers",
        f"http://127.0.0.1:{etcd_client}",
        "--bind-address",
        "127.0.0.1",
        "--advertise-address",
        "127.0.0.1",
        "--secure-port",
        str(api_port),
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
        # the aggregation layer, for extension API servers such as KEDA's metrics
        # API server; routed to the Service's endpoints (there is no kube-proxy)
        "--requestheader-client-ca-file",
        str(pki["ca.crt"]),
        "--requestheader-allowed-names",
        "front-proxy-client",
        "--requestheader-username-headers",
        "X-Remote-User",
        "--requestheader-group-headers",
        "X-Remote-Group",
        "--requestheader-extra-headers-prefix",
        "X-Remote-Extra-",
        "--proxy-client-cert-file",
        str(pki["front-proxy.crt"]),
        "--proxy-client-key-file",
        str(pki["front-proxy.key"]),
        "--enable-aggregator-routing=true",
    ]


def controller_common(kubeconfig: Path) -> list[str]:
    """Both controllers serve on loopback and authenticate callers with the admin config."""
    kc = str(kubeconfig)
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


def controller_manager_args(bins: Path, pki: dict, kubeconfig: Path) -> list[str]:
    return [
        str(bins / "kube-controller-manager"),
        *controller_common(kubeconfig),
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
    ]
