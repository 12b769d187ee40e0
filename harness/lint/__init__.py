"""Preflight rules for inference Deployments, from how vLLM, nginx and Kubernetes behave.

Reads Kubernetes YAML, finds each inference Deployment (by engine image or command) and
checks it with its PDB, HPA, KEDA ScaledObject, Service and Ingress. Pure functions from
parsed manifests to findings; only `load_manifests` touches files.

- manifests.py: reading YAML into `Manifest`s, field validation, a Deployment's neighbours
- rules.py: `RULES`, one function per rule (add a rule there)
- run.py: `lint()`, which reads each Deployment once and runs the selected rules
- output.py: text, GitHub annotations, the rule table, the exit code
"""

from harness.lint.manifests import LintInputError, Manifest, load_manifests, parse_documents
from harness.lint.output import exit_code, format_github, format_rules, format_text
from harness.lint.rules import RULES, SEVERITIES, Finding, LintOptions, Rule
from harness.lint.run import lint, select_rules

__all__ = [
    "RULES",
    "SEVERITIES",
    "Finding",
    "LintInputError",
    "LintOptions",
    "Manifest",
    "Rule",
    "exit_code",
    "format_github",
    "format_rules",
    "format_text",
    "lint",
    "load_manifests",
    "parse_documents",
    "select_rules",
]
