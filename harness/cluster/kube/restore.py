"""The Kubernetes target's restore: recorded before the first change, put back at the end."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import RESTORE, _message, connect
from harness.cluster.target import TargetError
from harness.config.schema import RunConfig


class Restoring:
    """What the run changes is written down before the first change and put back at
    the end; the record is removed last."""

    def _record_original(self, dep) -> None:
        """Before any change: what to put back, kept on the Deployment itself."""
        template = self.api.sanitize_for_serialization(dep.spec.template)
        strategy = self.api.sanitize_for_serialization(dep.spec.strategy)
        self._original = {
            "replicas": dep.spec.replicas,
            "template": template,
            "strategy": strategy,
            "run": self.run_dir.name,
        }

    def _mark_restore_pending(self) -> None:
        """Write (or rewrite) what to put back before changing anything."""
        self._marked = True
        note = json.dumps(self._original | {"cordoned": self._cordoned})
        self._patch_deployment({"metadata": {"annotations": {RESTORE: note}}})

    def restore(self) -> list[str]:
        """Put back replicas, the pod template, the strategy, cordons and KEDA pauses."""
        done: list[str] = []
        orig = self._original
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        current_template = self.api.sanitize_for_serialization(dep.spec.template)
        # the restore-pending record is removed last, once everything it lists is back: a
        # failure on the way leaves it for `rollcheck kube-restore`
        body: dict = {"spec": {}}
        if current_template != orig["template"]:
            body["spec"]["template"] = orig["template"]
            done.append("pod template")
        if self.api.sanitize_for_serialization(dep.spec.strategy) != orig["strategy"]:
            body["spec"]["strategy"] = orig["strategy"]
            done.append("rollout strategy")
        if dep.spec.replicas != orig["replicas"]:
            body["spec"]["replicas"] = orig["replicas"]
            done.append(f"replicas {dep.spec.replicas} -> {orig['replicas']}")
        # a replace of the template: a strategic merge would keep added args and env
        if "template" in body["spec"]:
            dep.spec.template = orig["template"]
            self.apps.patch_namespaced_deployment(
                self.k.deployment,
                self.ns,
                [{"op": "replace", "path": "/spec/template", "value": orig["template"]}],
            )
            del body["spec"]["template"]
        if body["spec"]:
            self._patch_deployment(body)
        for node in list(self._cordoned):
            self.core.patch_node(node, {"spec": {"unschedulable": False}})
            done.append(f"uncordoned {node}")
            self._cordoned.remove(node)
        for so in list(self._keda_paused):
            self._keda_annotate(so, None)
            done.append(f"unpaused ScaledObject {so}")
            self._keda_paused.remove(so)
        self.scaling.release()  # the count is the cluster's scalers' again
        self._patch_deployment({"metadata": {"annotations": {RESTORE: None}}})
        self.restored = done
        self._events.emit("restored", what=done)
        if done:
            print(
                f"rollcheck: restored {self.ns}/{self.k.deployment}: {', '.join(done)}", flush=True
            )
        return done


def restore_pending(cfg: RunConfig) -> list[str]:
    """`rollcheck kube-restore`: put back what an interrupted run recorded on the Deployment."""
    api = connect(cfg.kube.kubeconfig, cfg.kube.context)
    apps = client.AppsV1Api(api)
    where = f"{cfg.kube.namespace}/{cfg.kube.deployment}"
    try:
        dep = apps.read_namespaced_deployment(cfg.kube.deployment, cfg.kube.namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise TargetError(
                f"deployment {where} does not exist: nothing to restore (a deleted Deployment "
                "takes its restore record with it); check kube.namespace and kube.deployment"
            ) from None
        raise TargetError(
            f"reading deployment {where}: HTTP {exc.status} {_message(exc)}"
        ) from None
    note = (dep.metadata.annotations or {}).get(RESTORE)
    if not note:
        return []
    from harness.cluster.kube.target import KubeTarget

    t = KubeTarget(cfg, Path("reports") / "kube-restore", api=api)
    t.api, t.apps, t.core = api, apps, client.CoreV1Api(api)
    t.custom = client.CustomObjectsApi(api)
    orig = json.loads(note)
    t._original = {k: orig[k] for k in ("replicas", "template", "strategy", "run")}
    t._cordoned = list(orig.get("cordoned", []))
    t._keda_paused = [so for so in t._scaled_objects()]
    try:
        return t.restore()
    except ApiException as exc:  # the Deployment went away in between, or a node did
        raise TargetError(f"restoring {where}: HTTP {exc.status} {_message(exc)}") from None
