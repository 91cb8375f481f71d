"""Running workloads of an existing cluster whose containers could become root and mount a folder holding warmstart's
node folders (`/`, `/mnt`, /proc): read-only binds only the top mount (the array below stays writable), and a
recursively read-only one still reaches the container runtime's socket.

Once warmstart's host-path policy is in force (node_agent/host_path_policy.py), new pods of such a workload are
refused; the preflight names each one before `make deploy`, with the change that admits it. The same rule as the
policy's CEL, in Python (tests/hostile/test_hostile_admission.py holds the two to the same verdicts)."""

from __future__ import annotations

import re
from typing import Any

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.host_paths import PROC_HOLDS_LINKS, PROC_LINK, ROOT_CAPABILITIES, with_aliases
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem
from warmstart.terminal_text import shown
from warmstart.workload import compile_cache_root, pod_records_root, weights_root
from warmstart_cli.existing_cluster_objects import field

_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _through_proc(path: str) -> bool:
    return bool(re.match(PROC_LINK, path) or re.match(PROC_HOLDS_LINKS, path))


def _canonical(path: str) -> bool:
    return path.startswith("/") and "//" not in path and "/./" not in path and not path.endswith("/.")


def exposes(path: str, roots: list[str]) -> bool:
    """Whether a mount of host `path`, read-only or not, gives a root process a warmstart root (`roots` end with
    '/')."""
    folder = path if path.endswith("/") else path + "/"
    return _through_proc(path) or not _canonical(path) or any(r != folder and r.startswith(folder) for r in roots)


def cannot_become_root(container: dict, pod: dict) -> bool:
    own, context = container.get("securityContext") or {}, pod.get("securityContext") or {}
    if own.get("allowPrivilegeEscalation") is not False or own.get("privileged") is True:
        return False
    if "runAsUser" in own:
        return own["runAsUser"] != 0
    if "runAsUser" in context:
        return context["runAsUser"] != 0
    return bool(own["runAsNonRoot"]) if "runAsNonRoot" in own else context.get("runAsNonRoot") is True


def node_root_already(container: dict) -> bool:
    """Privileged, or given CAP_SYS_ADMIN: the node's root whatever it mounts (the policy leaves it be)."""
    own = container.get("securityContext") or {}
    added = (own.get("capabilities") or {}).get("add") or []
    return own.get("privileged") is True or any(a in ROOT_CAPABILITIES for a in added)


def refused_mounts(pod: dict, roots: list[str]) -> list[tuple[str, str]]:
    """(container, host path) of each mount of a folder holding the roots that the host-path policy refuses in
    another namespace (writes inside the roots are refused whoever makes them: the preflight lists these)."""
    volumes = {v.get("name"): field(v, "hostPath", "path") for v in pod.get("volumes") or [] if isinstance(v, dict)}
    refused = []
    for name in _LISTS:
        for container in pod.get(name) or []:
            if node_root_already(container) or cannot_become_root(container, pod):
                continue
            for mount in container.get("volumeMounts") or []:
                path = volumes.get(mount.get("name"))
                if isinstance(path, str) and exposes(path, roots):
                    refused.append((str(container.get("name")), path))
    return refused


def host_root_findings(config: EnvironmentConfig, workloads: Any) -> list[Problem]:
    """Each workload (a kubectl list of DaemonSets, Deployments, StatefulSets) outside warmstart's namespaces whose
    pods would be refused."""
    folders = (compile_cache_root(config), weights_root(config), pod_records_root(config))
    roots = with_aliases([r.rstrip("/") + "/" for r in folders if r])
    own = {AGENT_NAMESPACE, *(m.name for m in config.models), *config.cluster.trusted_node_readers}
    found = []
    for item in field(workloads, "items") or []:
        namespace, name = field(item, "metadata", "namespace"), field(item, "metadata", "name")
        pod = field(item, "spec", "template", "spec")
        if namespace in own or not isinstance(pod, dict):
            continue
        kind = shown(str(field(item, "kind") or "workload"))
        for container, path in refused_mounts(pod, roots):
            found.append(
                Problem(
                    "",
                    f"{kind} {shown(str(namespace))}/{shown(str(name))}: container {shown(container)} mounts "
                    f"{shown(path)} and may run as root, which gives it warmstart's NVMe folders (read-only binds only "
                    "the top mount); warmstart's host-path policy refuses its new pods",
                    "run the container non-root with allowPrivilegeEscalation: false (the node-exporter chart: "
                    "containerSecurityContext.allowPrivilegeEscalation: false), or, for a node agent you trust, "
                    f"add {shown(str(namespace))} to cluster.trusted_node_readers",
                )
            )
    return found
