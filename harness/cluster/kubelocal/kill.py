"""kube-local's kube.kill_command: signal an engine container's process through its
node's containerd (KubeLocal.kill_command prints the argv).

    python -m harness.cluster.kubelocal.kill NODES_FOLDER NODE CONTAINER_ID [SIGNAL]

One line and exit 2 when the node or the container is not there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.cluster.kubelocal.node import Node, NodeError


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    nodes, name, container_id = Path(argv[0]), argv[1], argv[2]
    folder = nodes / name
    if not folder.is_dir():
        print(f"kube-local kill: no node {name} in {nodes}", file=sys.stderr)
        return 2
    node = Node(name, folder, Path(), Path(), Path(), Path())
    try:
        node.kill_container(container_id, argv[3] if len(argv) == 4 else "SIGKILL")
    except NodeError as exc:
        print(f"kube-local kill: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
