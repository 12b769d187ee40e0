"""The prefill role of a prefill/decode deployment on a cluster (pd_rollout).

The decode role is the Deployment the target already holds (kube.deployment, behind the
gateway); the prefill role is a Deployment of its own (kube.pd_prefill_deployment),
behind the Service the decode pods' routing sidecars call. Its template and replicas
are written in the restore note before the first change and put back at the end. Its
pods are listed by the Deployment's selector while the target runs, into an events log
of their own (prefill/events.jsonl: who held which address when), which the decode
pods' routes (their logs: "KV from <host:port>") are traced through.
"""

from __future__ import annotations

import threading
from pathlib import Path

from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import OPT_IN, Cluster, Shared, engine_of
from harness.cluster.kube.watches import pod_view
from harness.cluster.target import PodView, TargetError
from harness.events import Event, EventLog

POLL_S = 0.5  # the prefill pods are listed this often while the target runs


class PrefillRole:
    def __init__(self, c: Cluster, s: Shared, mark_pending, rollout_body=None, log=False):
        """log: keep its pods' events in the run folder (a run's target; not the restore)."""
        self.c, self.s, self.mark_pending, self.rollout_body = c, s, mark_pending, rollout_body
        self.name = c.k.pd_prefill_deployment or (s.prefill or {}).get("name")
        folder = Path(c.run_dir) / "prefill"
        if log and self.name:
            folder.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(folder / "events.jsonl" if log and self.name else None)
        self._seen: dict[str, PodView] = {}  # uid -> its last view
        self._selector: str | None = None  # its pods' label selector, read once
        self._engine: str | None = None  # its engine container's name
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- before acting -------------------------------------------------------------
    def blocker(self) -> str | None:
        """Why pd_rollout cannot run on this cluster as configured."""
        if not self.name:
            return (
                "set kube.pd_prefill_deployment: the prefill role's Deployment (the decode "
                "role is kube.deployment, the one the gateway routes to)"
            )
        for verb, resource, sub in (("get", "deployments", ""), ("patch", "deployments", "")):
            if self.c.allowed(verb, resource, "apps", sub, name=self.name) is False:
                return (
                    f"RBAC: not allowed to {verb} deployment {self.name} in namespace "
                    f"{self.c.ns}, needed by pd_rollout"
                )
        for verb, resource, sub in (("list", "pods", ""), ("get", "pods", "log")):
            if self.c.allowed(verb, resource, "", sub) is False:
                what = "pods/log (the decode pods' routes)" if sub else "pods"
                return f"RBAC: not allowed to {verb} {what} in namespace {self.c.ns}"
        try:
            dep = self.read()
        except TargetError as exc:
            return str(exc)
        if (dep.metadata.labels or {}).get(OPT_IN) != "true":
            return (
                f"deployment {self.c.ns}/{self.name} (kube.pd_prefill_deployment) has not "
                f"opted in to chaos: add the label {OPT_IN}=true (kubectl label deployment "
                f"{self.name} -n {self.c.ns} {OPT_IN}=true)"
            )
        return None

    def read(self):
        try:
            return self.c.apps.read_namespaced_deployment(self.name, self.c.ns)
        except ApiException as exc:
            raise self.c.error(
                exc, "get", "deployments", f"kube.pd_prefill_deployment {self.name}"
            ) from None

    # --- its pods ------------------------------------------------------------------
    def start(self) -> None:
        """List its pods from now on, into its own events."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="watch-prefill", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.events.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.pods()
            except (TargetError, ApiException, OSError):
                pass  # the next listing tells
            self._stop.wait(POLL_S)

    def pods(self) -> list[PodView]:
        if self._selector is None:  # immutable in apps/v1, as a rollout keeps its container
            dep = self.read()
            labels = dep.spec.selector.match_labels or {}
            self._selector = ",".join(f"{k}={v}" for k, v in labels.items())
            self._engine = engine_of(dep.spec.template.spec, self.s.engine).name
        try:
            found = self.c.core.list_namespaced_pod(self.c.ns, label_selector=self._selector)
        except ApiException as exc:
            raise self.c.error(exc, "list", "pods", f"the pods of {self.name}") from None
        views = {p.metadata.uid: pod_view(p, self.s.port, self._engine) for p in found.items}
        with self._lock:  # the poller's and a scenario's listings, one at a time
            for uid, v in views.items():
                old = self._seen.get(uid)
                if v.address and (old is None or not old.address):
                    self.events.emit(
                        "pod_created", pod=v.name, version=v.version, address=v.address
                    )
            for uid in set(self._seen) - set(views):
                self.events.emit("pod_removed", pod=self._seen[uid].name)
            self._seen = views
        return list(views.values())

    # --- acts -------------------------------------------------------------------------
    def _record(self) -> None:
        """Before its first change: its template and replicas, in the restore note."""
        if self.s.prefill is None:
            dep = self.read()
            self.s.prefill = {
                "name": self.name,
                "template": self.c.api.sanitize_for_serialization(dep.spec.template),
                "replicas": dep.spec.replicas,
            }
        self.mark_pending()

    def _patch(self, body) -> None:
        try:
            self.c.apps.patch_namespaced_deployment(self.name, self.c.ns, body)
        except ApiException as exc:
            raise self.c.error(exc, "patch", "deployments", f"deployment {self.name}") from None

    def rollout(self, version: str, engine: dict | None) -> None:
        self._record()
        self._patch(self.rollout_body(self.read(), version, engine, None, None))

    def rollout_done(self) -> bool:
        dep = self.read()
        st, want = dep.status, dep.spec.replicas or 0
        return (
            (st.observed_generation or 0) >= (dep.metadata.generation or 0)
            and (st.updated_replicas or 0) == want
            and (st.replicas or 0) == want
            and (st.available_replicas or 0) == want
        )

    def put_back(self) -> list[str]:
        """Its template and replicas as recorded; what was put back."""
        record = self.s.prefill
        if not record:
            return []
        try:
            dep = self.c.apps.read_namespaced_deployment(record["name"], self.c.ns)
        except ApiException as exc:
            if exc.status == 404:
                self.s.prefill = None
                return []
            raise self.c.error(exc, "get", "deployments", f"deployment {record['name']}") from None
        done = []
        if self.c.api.sanitize_for_serialization(dep.spec.template) != record["template"]:
            self.c.replace_template(record["name"], record["template"])
            done.append(f"Deployment {record['name']}'s pod template")
        if dep.spec.replicas != record["replicas"]:
            self.c.apps.patch_namespaced_deployment(
                record["name"], self.c.ns, {"spec": {"replicas": record["replicas"]}}
            )
            done.append(f"Deployment {record['name']}'s replicas {record['replicas']}")
        self.s.prefill = None
        return done

    def all_events(self) -> list[Event]:
        return self.events.all()
