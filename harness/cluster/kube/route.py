"""The user's Gateway API HTTPRoute, as weighted_canary and shadow change it on a cluster:
the weights of the two backendRefs the config names (kube.stable_service,
kube.candidate_service) in one rule (kube.route_rule), and a RequestMirror filter to the
candidate in that rule. Nothing else of the route is touched: every change is a JSON
patch that first tests the rule still names those two backends (a route edited by
someone else meanwhile is refused, not overwritten), and what the rule held is recorded
before the first change and put back at the end.

Whether the gateway applied a change is the gateway's to say: the route's status, each
parent's Accepted condition with an observedGeneration at or after the change's
generation (the Gateway API's contract for route status).

Whether it can mirror at all is its GatewayClass's to say (status.supportedFeatures,
Gateway API v1.2): a gateway that does not implement the RequestMirror filter may still
accept the route and answer every request of the rule with an error (Traefik v3.6 answers
500, docs/facts.md), so no mirror is written where the class does not list it.
"""

from __future__ import annotations

import copy

from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import _message
from harness.cluster.target import TargetError

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
MIRROR_FEATURE = "HTTPRouteRequestMirror"  # the Gateway API's name for the filter's support


def feature_names(gateway_class: dict) -> set[str] | None:
    """The features a GatewayClass (the API's JSON) says its gateway implements: v1.2's
    status.supportedFeatures (objects with a name; plain names in the experimental
    channel before it); None where its status lists none."""
    listed = (gateway_class.get("status") or {}).get("supportedFeatures")
    if not listed:
        return None
    return {f.get("name", "") if isinstance(f, dict) else str(f) for f in listed}


def parents_accepted(route: dict, generation: int) -> bool | None:
    """Whether every parent (Gateway) of the route (the API's JSON) has accepted it at or
    after `generation`; None while no gateway has written a status for it."""
    parents = ((route.get("status") or {}).get("parents")) or []
    if not parents:
        return None
    return all(
        any(
            c.get("type") == "Accepted"
            and c.get("status") == "True"
            and int(c.get("observedGeneration") or 0) >= generation
            for c in parent.get("conditions") or []
        )
        for parent in parents
    )


def route_of(c, record: dict | None = None) -> Route:
    """The route the config names (kube.route, kube.route_rule and the two Services), or
    the one a restore record names."""
    if record:
        return Route(
            c.custom, c.ns, record["name"], record["rule"], record["stable"], record["candidate"]
        )
    k = c.k
    return Route(c.custom, c.ns, k.route, k.route_rule, k.stable_service, k.candidate_service)


class Route:
    def __init__(self, custom, namespace: str, name: str, rule: int, stable: str, candidate: str):
        self.custom, self.ns, self.name, self.rule = custom, namespace, name, rule
        self.stable, self.candidate = stable, candidate

    @property
    def where(self) -> str:
        return f"HTTPRoute {self.ns}/{self.name}"

    def read(self) -> dict:
        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.ns, PLURAL, self.name
            )
        except ApiException as exc:
            if exc.status == 404:
                raise TargetError(
                    f"{self.where} does not exist (or the Gateway API's CRDs are not "
                    "installed): set kube.route to the HTTPRoute your gateway serves the model by"
                ) from None
            raise TargetError(f"reading {self.where}: HTTP {exc.status} {_message(exc)}") from None

    def _rule(self, route: dict) -> dict:
        rules = (route.get("spec") or {}).get("rules") or []
        if self.rule >= len(rules):
            raise TargetError(
                f"{self.where} has {len(rules)} rules: kube.route_rule {self.rule} is not one"
            )
        return rules[self.rule]

    def _refs(self, rule: dict) -> tuple[int, int]:
        """The indexes of the stable and the candidate backendRef in the rule."""
        names = [(r.get("name"), r.get("kind", "Service")) for r in rule.get("backendRefs") or []]
        found = {}
        for want in (self.stable, self.candidate):
            hits = [i for i, (n, kind) in enumerate(names) if n == want and kind == "Service"]
            if len(hits) != 1:
                listed = ", ".join(n or "?" for n, _ in names) or "none"
                raise TargetError(
                    f"{self.where} rule {self.rule} names the Service {want} "
                    f"{len(hits)} times among its backendRefs ({listed}): it must name "
                    "kube.stable_service and kube.candidate_service once each"
                )
            found[want] = hits[0]
        return found[self.stable], found[self.candidate]

    def gateway_classes(self) -> dict[str, tuple[str, set[str] | None]]:
        """Each Gateway the route is attached to ("namespace/name"), with its GatewayClass
        and the features that class lists (feature_names)."""
        out = {}
        for ref in (self.read().get("spec") or {}).get("parentRefs") or []:
            if ref.get("group", GROUP) != GROUP or ref.get("kind", "Gateway") != "Gateway":
                continue
            ns, name = ref.get("namespace") or self.ns, ref["name"]
            gateway = self._get(f"Gateway {ns}/{name}", "gateways", name, ns)
            cls = (gateway.get("spec") or {}).get("gatewayClassName", "")
            listed = feature_names(self._get(f"GatewayClass {cls}", "gatewayclasses", cls))
            out[f"{ns}/{name}"] = (cls, listed)
        return out

    def _get(self, what: str, plural: str, name: str, namespace: str | None = None) -> dict:
        try:
            if namespace is None:
                return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            raise TargetError(f"reading {what}: HTTP {exc.status} {_message(exc)}") from None

    def snapshot(self) -> dict:
        """What the rule holds now that rollcheck may change: its backendRefs and filters
        (the restore record), and the route's generation."""
        route = self.read()
        rule = self._rule(route)
        self._refs(rule)
        return {
            "name": self.name,
            "rule": self.rule,
            "stable": self.stable,
            "candidate": self.candidate,
            "backendRefs": copy.deepcopy(rule.get("backendRefs") or []),
            "filters": copy.deepcopy(rule.get("filters")),
        }

    def set_weight(self, percent: float) -> int:
        """The candidate's backendRef weighted percent, the stable one 100 - percent (the
        Gateway API's weights are relative); returns the route's new generation."""
        rule = self._rule(self.read())
        s, c = self._refs(rule)
        base = f"/spec/rules/{self.rule}/backendRefs"
        ops = self._guard(rule) + [
            {"op": "add", "path": f"{base}/{s}/weight", "value": int(round(100 - percent))},
            {"op": "add", "path": f"{base}/{c}/weight", "value": int(round(percent))},
        ]
        return self._patch(ops, f"the weights of {self.stable} and {self.candidate}")

    def set_mirror(self, percent: float, original_filters: list | None) -> int:
        """A RequestMirror filter to the candidate's Service for percent of the requests,
        after the rule's own filters (0: the rule's own filters alone)."""
        rule = self._rule(self.read())
        _, c = self._refs(rule)
        filters = list(original_filters or [])
        if percent > 0:
            ref = {"name": self.candidate}
            port = (rule.get("backendRefs") or [])[c].get("port")
            if port is not None:
                ref["port"] = port
            mirror = {"backendRef": ref, "percent": int(round(percent))}
            filters.append({"type": "RequestMirror", "requestMirror": mirror})
        path = f"/spec/rules/{self.rule}/filters"
        op = {"op": "add", "path": path, "value": filters} if filters else None
        if op is None:
            ops = [{"op": "remove", "path": path}] if "filters" in rule else []
        else:
            ops = [op]
        if not ops:
            return int(self.read()["metadata"].get("generation") or 0)
        return self._patch(self._guard(rule) + ops, f"the mirror to {self.candidate}")

    def put_back(self, record: dict) -> int | None:
        """The rule's backendRefs and filters as recorded: the route's new generation, or
        None where nothing had changed."""
        rule = self._rule(self.read())
        if (
            rule.get("backendRefs") == record["backendRefs"]
            and rule.get("filters") == record["filters"]
        ):
            return None
        base = f"/spec/rules/{self.rule}"
        ops = [{"op": "replace", "path": f"{base}/backendRefs", "value": record["backendRefs"]}]
        if record["filters"] is None:
            ops += [{"op": "remove", "path": f"{base}/filters"}] if "filters" in rule else []
        else:
            ops.append({"op": "add", "path": f"{base}/filters", "value": record["filters"]})
        return self._patch(ops, "its weights and filters as they were")

    def accepted(self, generation: int) -> bool | None:
        """Whether every parent (Gateway) of the route has accepted it at or after
        `generation`; None while no gateway has written a status for it."""
        return parents_accepted(self.read(), generation)

    def _guard(self, rule: dict) -> list[dict]:
        """JSON patch tests: the rule still names the two backends where it did."""
        s, c = self._refs(rule)
        base = f"/spec/rules/{self.rule}/backendRefs"
        return [
            {"op": "test", "path": f"{base}/{s}/name", "value": self.stable},
            {"op": "test", "path": f"{base}/{c}/name", "value": self.candidate},
        ]

    def _patch(self, ops: list[dict], what: str) -> int:
        try:
            out = self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                self.ns,
                PLURAL,
                self.name,
                ops,
                _content_type="application/json-patch+json",
            )
        except ApiException as exc:
            raise TargetError(
                f"changing {what} on {self.where}: HTTP {exc.status} {_message(exc)}"
            ) from None
        return int(out["metadata"].get("generation") or 0)
