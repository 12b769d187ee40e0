"""A kube-local node losing power, and coming back: node_loss's act on kube-local
(KubeLocal.power_command gives the argv of each, for kube.node_loss_command and
kube.node_return_command).

    python -m harness.cluster.kubelocal.power NODES_FOLDER NODE off|on

off: packets into and out of the node's bridge are dropped (no RST reaches anyone, as
with a machine that lost power), then its kubelet, its containerd, the containers'
shims and every process in its containers are frozen (SIGSTOP): the API server hears
nothing more from the node, and its pods neither answer nor close a connection. on:
the processes continue, then the rules go; the kubelet reports again and ends what the
cluster deleted meanwhile. One line and exit 2 when the node is not running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.proc import PID_DIR


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _bundles(state: Path) -> list[Path]:
    return list(state.glob("io.containerd.runtime.v2.task/*/*"))


def _shims(state: Path) -> list[int]:
    """The containerd shims of a node: each is the parent of its containers."""
    pids = set()
    for bundle in _bundles(state):
        try:
            init = int((bundle / "init.pid").read_text().strip())
            ppid = int(Path(f"/proc/{init}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid > 1 and "containerd-shim" in Path(f"/proc/{ppid}/cmdline").read_text(
            errors="replace"
        ):
            pids.add(ppid)
    return sorted(pids)


def power_rules(bridge: str) -> list[list[str]]:
    """The rules that cut a node off this machine (the FORWARD rules already keep its
    bridge from the others)."""
    return [
        ["INPUT", "-i", bridge, "-j", "DROP"],
        ["OUTPUT", "-o", bridge, "-j", "DROP"],
    ]


def record_of(folder: Path) -> dict | None:
    """The running node's record (node.Leftovers) whose folder is `folder`."""
    want = str(Path(folder).resolve())
    for path in sorted(PID_DIR.glob("kube-node-*.json")) if PID_DIR.exists() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("dir") == want:
            return record
    return None


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(roots: list[int]) -> list[int]:
    """The roots and every process below them, parents first."""
    kids, out, todo = _children(), [], list(roots)
    while todo:
        pid = todo.pop(0)
        if pid not in out:
            out.append(pid)
            todo += kids.get(pid, [])
    return out


def node_processes(record: dict) -> list[int]:
    """The node's processes, in the order a power loss stops them: the kubelet, containerd,
    then each shim with its containers' processes."""
    daemons = []
    for name in ("kubelet", "containerd"):
        pid, start = (record.get("pids") or {}).get(name, (0, None))
        if pid and start and _start_time(pid) == start:
            daemons.append(pid)
    shims = _shims(Path(record["dir"]) / "state") if record.get("dir") else []
    return daemons + [p for p in _tree(shims) if p not in daemons]


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _iptables(op: str, rule: list[str]) -> int:
    return subprocess.run(["iptables", "-w", op, *rule], capture_output=True).returncode


def power_off(record: dict) -> list[int]:
    """Cut the node off and freeze it; the processes frozen."""
    for rule in power_rules(record["bridge"]):
        if _iptables("-C", rule) != 0:
            if _iptables("-I", rule) != 0:
                raise OSError(f"iptables -I {' '.join(rule)} failed")
    pids = node_processes(record)
    _signal(pids, signal.SIGSTOP)
    return pids


def power_on(record: dict) -> list[int]:
    """Thaw the node (its containers first, the kubelet last), then let packets through
    again; the processes continued. Safe on a node that was never off."""
    pids = node_processes(record)
    _signal(list(reversed(pids)), signal.SIGCONT)
    for rule in power_rules(record.get("bridge") or ""):
        while record.get("bridge") and _iptables("-D", rule) == 0:
            pass
    return pids


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] not in ("off", "on"):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    nodes, name, how = Path(argv[0]), argv[1], argv[2]
    record = record_of(nodes / name)
    if record is None or not record.get("bridge"):
        print(f"kube-local power: no running node {name} in {nodes}", file=sys.stderr)
        return 2
    try:
        (power_off if how == "off" else power_on)(record)
    except OSError as exc:
        print(f"kube-local power: {name}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
