"""Targets: one interface (target.py) over the embedded local target (local/), a
Kubernetes cluster (kube/) and the embedded control plane that tests it (kubelocal/),
and what a pod spec says (podspec.py, pure). Import from the modules themselves: this
package loads nothing, so the pure parts can be used without the targets."""
