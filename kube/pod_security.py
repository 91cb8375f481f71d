"""Pod Security Admission labels: the level each namespace warmstart creates is meant to meet, enforced, audited
and warned at once, pinned to the cluster's Kubernetes minor (a control-plane upgrade does not change what a level
checks until the config's `cluster.kubernetes_version` moves too).

The levels (Kubernetes "Pod Security Standards"): `privileged` checks nothing; `baseline` forbids hostPath volumes,
host namespaces and ports, privileged containers and added capabilities; `restricted` also requires non-root,
dropping every capability, no privilege escalation and the RuntimeDefault seccomp profile. Where a namespace must be
`privileged` (its pods mount the node's cache folders), node_agent/host_path_policy.py keeps its pods to exactly
what warmstart renders. The control-plane tier (tests/cluster/test_pod_security.py) admits each namespace's pods at
its level and shows the next level refuses them.
"""

from __future__ import annotations

from typing import Literal

Level = Literal["privileged", "baseline", "restricted"]
LEVELS: tuple[Level, ...] = ("privileged", "baseline", "restricted")  # loosest first
PREFIX = "pod-security.kubernetes.io"

# warmstart-system: the agent mounts the cache folders and the pod logs (hostPath) and runs as root.
SYSTEM_LEVEL: Level = "privileged"
# A model's namespace: its vLLM pods mount their compile folder, the markers, the weights and their record folder.
MODEL_LEVEL: Level = "privileged"
# warmstart-monitoring: Prometheus and KEDA from their charts (no hostPath, host namespace or privilege;
# Prometheus' containers do not drop every capability nor set a seccomp profile, so not `restricted`).
MONITORING_LEVEL: Level = "baseline"


def pod_security_labels(level: Level, kubernetes_version: str) -> dict[str, str]:
    """`enforce`, `audit` and `warn` at `level`, each pinned to `v<minor>` (e.g. v1.35)."""
    version = f"v{kubernetes_version.removeprefix('v')}"
    labels: dict[str, str] = {}
    for mode in ("enforce", "audit", "warn"):
        labels[f"{PREFIX}/{mode}"] = level
        labels[f"{PREFIX}/{mode}-version"] = version
    return labels
