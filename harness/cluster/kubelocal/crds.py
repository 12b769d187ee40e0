"""CustomResourceDefinitions applied to kube-local's API server from a folder of YAML:
KEDA's (scripts/build-keda) and the Gateway API's standard channel
(scripts/build-gateway-api: HTTPRoute for weighted_canary's and shadow's route tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client

from harness.cluster.kubelocal.daemons import built

ROOT = Path(__file__).resolve().parents[3]
GATEWAY_API_SCRIPT = ROOT / "scripts" / "build-gateway-api"


def apply_crds(api: client.ApiClient, folder: Path, error: Callable[[str], Exception]) -> list[str]:
    """Create (or replace) every CRD in the folder's YAML files; other kinds are passed
    over. The names applied."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(folder.glob("*.yaml")):
        for crd in (d for d in yaml.safe_load_all(path.read_text()) if d):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            name = crd["metadata"]["name"]
            try:
                ext.create_custom_resource_definition(crd)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise error(f"creating CRD {name}: {exc.reason}") from None
                old = ext.read_custom_resource_definition(name)
                crd["metadata"]["resourceVersion"] = old.metadata.resource_version
                ext.replace_custom_resource_definition(name, crd)
            names.append(name)
    return names


def gateway_api_crds(error: Callable[[str], Exception]) -> Path:
    """The Gateway API's standard CRDs, fetched from its Go module on first use."""
    return built(GATEWAY_API_SCRIPT, "ROLLCHECK_GATEWAY_API_DIR", error) / "crds"
