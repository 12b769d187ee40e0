"""Who else manages a Deployment, from its metadata (the API's JSON form): a controller
that owns it (ownerReferences) or a GitOps tool or operator that marks what it applies.
Each of them reverts a change to the Deployment mid-run (KServe, llm-d and
LeaderWorkerSet reconcile their workloads; Argo CD with selfHeal and Flux re-apply the
source), so the harness refuses one unless told otherwise. Pure: no API calls."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    name: str  # who: "KServe LLMInferenceService/llama", "Argo CD application shop"
    how: str  # what says so: the ownerReference, the label or annotation
    fix: str  # what the user can do instead


# The markers each tool leaves on what it manages (their documentation's names), and what
# to do instead. Helm's `app.kubernetes.io/managed-by: Helm` is not here: Helm applies once
# and does not revert, and a Helm-managed Deployment is the common case.
_ARGO = "disable the Application's automated sync (selfHeal) for the run"
_FLUX = "suspend it for the run (flux suspend)"
_OPERATOR = "point rollcheck at a Deployment the operator does not reconcile, or pause it"
_MARKERS = [
    # Argo CD's annotation tracking (the default since Argo CD 3.0) and its label tracking
    ("annotation", "argocd.argoproj.io/tracking-id", "Argo CD application {value}", _ARGO),
    ("label", "argocd.argoproj.io/instance", "Argo CD application {value}", _ARGO),
    # Flux's kustomize-controller and helm-controller label what they apply
    ("label", "kustomize.toolkit.fluxcd.io/name", "Flux Kustomization {value}", _FLUX),
    ("label", "helm.toolkit.fluxcd.io/name", "Flux HelmRelease {value}", _FLUX),
    # KServe labels an InferenceService's workloads with its name
    ("label", "serving.kserve.io/inferenceservice", "KServe InferenceService {value}", _OPERATOR),
    ("label", "leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet {value}", _OPERATOR),
]
# what a managed-by label may name without reverting anything later
_APPLY_ONCE = {"helm", "kubectl", "kustomize"}


def owner_of(meta: dict) -> Owner | None:
    """The controller or tool that manages an object with this metadata, or None."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            who = f"{ref.get('kind')}/{ref.get('name')} ({ref.get('apiVersion')})"
            return Owner(
                who,
                "it is the Deployment's controller (ownerReferences)",
                f"change the {ref.get('kind')} instead of its Deployment, or pause its "
                "reconciliation for the run",
            )
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for where, key, who, fix in _MARKERS:
        value = (annotations if where == "annotation" else labels).get(key)
        if value:
            return Owner(who.format(value=value), f"{where} {key}={value}", fix)
    managed_by = labels.get("app.kubernetes.io/managed-by")
    if managed_by and managed_by.lower() not in _APPLY_ONCE:
        return Owner(managed_by, f"label app.kubernetes.io/managed-by={managed_by}", _OPERATOR)
    return None
