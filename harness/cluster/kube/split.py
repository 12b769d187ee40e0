"""weighted_canary's act on a cluster: a candidate Deployment of its own behind the
candidate Service, and the user's HTTPRoute weights moved between the two Services
(harness.cluster.kube.route).

The candidate is a copy of the Deployment's pod template at the new version, labelled so
that the candidate Service selects it and the stable Service does not: each label the
stable Service selects on is dropped from the copy unless the candidate Service's selector
sets it (to its own value). Its replicas follow the step (ceil(weight x replicas), as Argo
Rollouts sizes a canary). Its pods are watched as the Deployment's are (a second pod
watch, on the candidate's own label), so every stream the gateway sent them is traced.

A weight counts as applied once the gateway says so: the route's status, every parent
Accepted at or after the change's generation, and kube.route_settle_s after that for its
proxies to follow (the status is the control plane's word); then `gateway_updated` goes
on the timeline with the split, as the local gateway writes it. The candidate Deployment and the
route's rule are written in the restore note before either changes; the end (or
`rollcheck kube-restore`) deletes the one and puts the other back.
"""

from __future__ import annotations

import copy
import threading
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import CANDIDATE_LABEL, Cluster, Shared, _message
from harness.cluster.kube.route import MIRROR_FEATURE, Route, route_of
from harness.cluster.target import TargetError

ACCEPT_S = 60.0  # how long a change's acceptance is looked for
POLL_S = 0.2

GW = "gateway.networking.k8s.io"


def asked(k) -> list[tuple[str, str, str, str | None]]:
    """What the weighted canary asks before acting, (verb, resource, group, name): each
    by name where the chart grants it by name (target.route)."""
    cand = candidate_name(k.deployment)
    return [
        ("get", "httproutes", GW, k.route),
        ("patch", "httproutes", GW, k.route),
        ("get", "services", "", k.stable_service),
        ("get", "services", "", k.candidate_service),
        ("create", "deployments", "apps", None),
        ("get", "deployments", "apps", cand),
        ("patch", "deployments", "apps", cand),
        ("delete", "deployments", "apps", cand),
    ]


def candidate_name(deployment: str) -> str:
    return f"{deployment}-rollcheck-candidate"[:63].rstrip("-")


def selects(selector: dict, labels: dict) -> bool:
    """Whether a Service's selector (an empty one selects nothing) selects these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def candidate_labels(template_labels: dict, stable: dict, candidate: dict, of: str) -> dict:
    """The candidate's pod labels: the template's, without the keys the stable Service
    selects on (unless the candidate Service's selector sets them), with the candidate
    Service's selector and the candidate label."""
    labels = {k: v for k, v in template_labels.items() if k not in stable or k in candidate}
    return labels | candidate | {CANDIDATE_LABEL: of}


def candidate_deployment(
    dep: dict, change: dict, stable: dict, candidate: dict, run: str, replicas: int = 1
) -> dict:
    """The candidate Deployment (the API's JSON) from the Deployment `dep` and `change`, the
    rollout patch that would take it to the new version (template labels, annotations and
    the engine container's image and args)."""
    template = copy.deepcopy(dep["spec"]["template"])
    meta = template.setdefault("metadata", {})
    want = change["spec"]["template"]
    labels = (meta.get("labels") or {}) | want["metadata"].get("labels", {})
    meta["labels"] = candidate_labels(labels, stable, candidate, dep["metadata"]["name"])
    meta["annotations"] = (meta.get("annotations") or {}) | want["metadata"].get("annotations", {})
    for new in want["spec"]["containers"]:
        for c in template["spec"]["containers"]:
            if c["name"] == new["name"]:
                c.update({k: v for k, v in new.items() if k != "name"})
    name = dep["metadata"]["name"]
    spec = dep["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": candidate_name(name),
            "labels": {CANDIDATE_LABEL: name},
            "annotations": {"rollcheck.io/run": run},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": candidate | {CANDIDATE_LABEL: name}},
            "template": template,
            **{
                k: spec[k]
                for k in ("minReadySeconds", "progressDeadlineSeconds", "strategy")
                if spec.get(k) is not None
            },
        },
    }


class WeightedSplit:
    """The candidate Deployment and the route's weights, for one run."""

    def __init__(self, c: Cluster, s: Shared, mark_pending, watch_pods):
        self.c, self.s, self.mark_pending, self.watch_pods = c, s, mark_pending, watch_pods
        self.version: str | None = None
        self.percent = 0.0
        self.mirror = 0.0
        self._generation = 0
        self._route: Route | None = None

    # --- before acting -------------------------------------------------------------
    def blocker(self, scenario: str = "weighted_canary") -> str | None:
        """Why the weighted canary (or shadow) cannot run on this cluster as configured."""
        k = self.c.k
        if not k.route:
            how = "moves" if scenario == "weighted_canary" else "mirrors by"
            return (
                f"{scenario} on a cluster {how} a Gateway API HTTPRoute: set "
                "kube.route (the HTTPRoute your gateway serves the model by), "
                "kube.stable_service and kube.candidate_service (the two Services its rule's "
                "backendRefs name)"
            )
        for verb, resource, group, name in asked(k):
            if self.c.allowed(verb, resource, group, name=name) is False:
                what = f"{resource} {name}" if name else resource
                return (
                    f"RBAC: not allowed to {verb} {what} in namespace {self.c.ns}, needed "
                    f"by {scenario}; set the chart's target.route (name, stableService, "
                    "candidateService), which grants it"
                )
        try:
            route_of(self.c).snapshot()
        except TargetError as exc:
            return str(exc)
        try:
            stable, candidate = self._selectors()
        except TargetError as exc:
            return str(exc)
        labels = self.c.read_deployment().spec.template.metadata.labels or {}
        if not selects(stable, labels):
            return (
                f"kube.stable_service {k.stable_service} does not select the pods of "
                f"Deployment {k.deployment} (selector {_text(stable)}): point it at the "
                "Service that serves the baseline"
            )
        cand = candidate_name(k.deployment)
        try:
            self.c.apps.read_namespaced_deployment(cand, self.c.ns)
            return (
                f"a Deployment {cand} is there already (an interrupted run's candidate?): "
                "run `rollcheck kube-restore`, or delete it if it is not rollcheck's"
            )
        except ApiException as exc:
            if exc.status != 404:
                return str(self.c.error(exc, "get", "deployments", f"deployment {cand}"))
        if selects(candidate, labels):
            return (
                f"kube.candidate_service {k.candidate_service}'s selector ({_text(candidate)}) "
                f"selects the baseline's pods too: the candidate would not be alone behind "
                "it; give it a label the baseline's pods lack (e.g. track: candidate)"
            )
        return None

    def mirror_blocker(self) -> str | None:
        """Why shadow cannot mirror on this cluster: the weighted canary's reasons, or a
        gateway whose GatewayClass does not list the RequestMirror filter among its
        features (one that lists none, or cannot be read, is taken at kube.gateway_mirrors'
        word)."""
        found = self.blocker("shadow")
        if found:
            return found
        route = route_of(self.c)
        danger = (
            "a gateway without it may accept the filter and answer every request of the "
            "rule with an error (Traefik v3.6 answers 500)"
        )
        try:
            classes = route.gateway_classes()
        except TargetError as exc:
            unknown = str(exc)
        else:
            lacking = [
                f"{gw} (GatewayClass {cls})"
                for gw, (cls, listed) in classes.items()
                if listed is not None and MIRROR_FEATURE not in listed
            ]
            if lacking:
                return (
                    f"the gateway serving {route.where}, {', '.join(lacking)}, does not "
                    f"implement the RequestMirror filter ({MIRROR_FEATURE} is not among its "
                    f"class's status.supportedFeatures); {danger}: shadow needs a gateway "
                    "that mirrors"
                )
            silent = [f"GatewayClass {cls}" for cls, listed in classes.values() if listed is None]
            if not classes:
                unknown = f"{route.where} names no Gateway among its parentRefs"
            elif not silent:
                return None
            else:
                unknown = f"{', '.join(silent)} lists no status.supportedFeatures"
        if self.c.k.gateway_mirrors:
            return None
        return (
            f"cannot tell whether the gateway serving {route.where} implements the "
            f"RequestMirror filter: {unknown}; {danger}. Set kube.gateway_mirrors=true if "
            "yours implements it"
        )

    def _selectors(self) -> tuple[dict, dict]:
        out = []
        for key in ("stable_service", "candidate_service"):
            name = getattr(self.c.k, key)
            try:
                svc = self.c.core.read_namespaced_service(name, self.c.ns)
            except ApiException as exc:
                raise self.c.error(exc, "get", "services", f"kube.{key} Service {name}") from None
            sel = dict(svc.spec.selector or {})
            if not sel:
                raise TargetError(
                    f"kube.{key} Service {name} has no selector: rollcheck labels the "
                    "candidate's pods by the Services' selectors"
                )
            out.append(sel)
        return out[0], out[1]

    # --- the act ----------------------------------------------------------------------
    def start(self, version: str, change: dict) -> None:
        """The route at weight 0 for the candidate, then the candidate Deployment (one
        replica) at `version`; both written in the restore note first."""
        route = self._route = route_of(self.c)
        stable, candidate = self._selectors()
        dep = self.c.api.sanitize_for_serialization(self.c.read_deployment())
        body = candidate_deployment(dep, change, stable, candidate, self.c.run_dir.name)
        self.s.route = self.s.route or route.snapshot()
        self.s.candidate = body["metadata"]["name"]
        self.mark_pending()
        self.version = version
        self.watch_pods(f"{CANDIDATE_LABEL}={self.c.deployment}")
        self.set_weight(0.0)
        try:
            self.c.apps.create_namespaced_deployment(self.c.ns, body)
        except ApiException as exc:
            raise TargetError(
                f"making the candidate Deployment {body['metadata']['name']}: "
                f"HTTP {exc.status} {_message(exc)}"
            ) from None

    def scale(self, replicas: int) -> None:
        name = self.s.candidate
        if not name:
            raise TargetError("scale_candidate: no candidate was started (start_candidate)")
        try:
            self.c.apps.patch_namespaced_deployment(
                name, self.c.ns, {"spec": {"replicas": int(replicas)}}
            )
        except ApiException as exc:
            raise self.c.error(exc, "patch", "deployments", f"deployment {name}") from None

    def set_weight(self, percent: float) -> None:
        if self._route is None:
            raise TargetError("set_weight: no candidate was started (start_candidate)")
        self.percent = percent
        self._applied_when_accepted(self._route, self._route.set_weight(percent), self._split())

    def set_mirror(self, percent: float) -> None:
        if self._route is None:
            raise TargetError("set_mirror: no candidate was started (start_candidate)")
        self.mirror = percent
        gen = self._route.set_mirror(percent, (self.s.route or {}).get("filters"))
        self._applied_when_accepted(self._route, gen, self._split())

    def _split(self) -> dict:
        return {"version": self.version, "percent": self.percent, "mirror": self.mirror}

    def _applied_when_accepted(self, route: Route, generation: int, split: dict | None) -> None:
        """gateway_updated with the split (None: the route as it was), once every parent of
        the route accepted this generation (looked for in a thread: the scenario waits on
        the event)."""
        self._generation = generation
        detail = {"split": split} if split is not None else {}

        settle = self.c.k.route_settle_s

        def wait() -> None:
            deadline = time.monotonic() + ACCEPT_S
            while time.monotonic() < deadline and self._generation == generation:
                if _accepted(route, generation):
                    accepted = time.time()
                    # the proxies follow the control plane's word: counted applied after
                    # kube.route_settle_s, unless a newer change came meanwhile
                    time.sleep(settle)
                    if self._generation == generation:
                        self.c.emit(
                            "gateway_updated",
                            route=route.name,
                            generation=generation,
                            accepted_at=accepted,
                            settle_s=settle,
                            **detail,
                        )
                    return
                time.sleep(POLL_S)

        threading.Thread(target=wait, name="route-accepted", daemon=True).start()

    def settle(self) -> None:
        """Until the gateway accepted the last change (at most ACCEPT_S): before the
        candidate goes, so that the gateway sends it nothing new."""
        if self._route is not None:
            self._wait_applied(self._route, self._generation)

    def _wait_applied(self, route: Route, generation: int) -> None:
        """Until the gateway accepted `generation` (at most ACCEPT_S), and its proxies had
        kube.route_settle_s to follow."""
        deadline = time.monotonic() + ACCEPT_S
        while time.monotonic() < deadline:
            if _accepted(route, generation):
                time.sleep(self.c.k.route_settle_s)
                return
            time.sleep(POLL_S)

    def stop(self) -> None:
        """No acceptance is looked for any more (before the timeline closes)."""
        self._generation = -1

    def remove_candidate(self) -> list[str]:
        """The candidate Deployment deleted (its pods end gracefully); what was removed."""
        name = self.s.candidate
        if not name:
            return []
        try:
            self.c.apps.delete_namespaced_deployment(
                name, self.c.ns, body=client.V1DeleteOptions(propagation_policy="Foreground")
            )
            done = [f"candidate Deployment {name}"]
        except ApiException as exc:
            if exc.status != 404:
                raise self.c.error(exc, "delete", "deployments", f"deployment {name}") from None
            done = []
        self.s.candidate = None
        return done

    def end(self) -> list[str]:
        """The route's rule as it was, then the candidate removed."""
        done = []
        if self.s.route:
            record = self.s.route
            route = route_of(self.c, record)
            generation = route.put_back(record)
            if generation is not None:
                done.append(f"HTTPRoute {record['name']} rule {record['rule']} as it was")
                self._applied_when_accepted(route, generation, None)
                # the candidate goes once the gateway sends it nothing new (its streams in
                # flight end in its pods' grace period)
                self._wait_applied(route, generation)
            self.s.route = None
        done += self.remove_candidate()
        self._route = None
        return done


def _accepted(route: Route, generation: int) -> bool:
    try:
        return bool(route.accepted(generation))
    except TargetError:
        return False


def _text(selector: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in selector.items()) or "none"


__all__ = [
    "CANDIDATE_LABEL",
    "WeightedSplit",
    "candidate_deployment",
    "candidate_labels",
    "candidate_name",
    "selects",
]
