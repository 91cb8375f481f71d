"""What runs inside an existing cluster, against the config: its add-ons (the EKS add-on, or the DaemonSet a team
installed another way), its NVIDIA device plugin, its Karpenter, and the access its nodes' role has.

Pure functions over the AWS CLI's and the cluster API's answers, read as untrusted (a field of the wrong type is
"not what the config says"). `None` for an answer means it could not be read: that is a note, never a pass and never
a finding.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from contracts.gpu_pool import gpu_node_pool_name
from contracts.pod_labels import GPU_POOL_LABEL, POOL_TAINTS
from warmstart.config.compute import KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_model import karpenter_figures
from warmstart.problem import Problem
from warmstart.terminal_text import shown

# Karpenter's labels on every node it launches, from the instance type (karpenter-provider-aws v1.14.1 labels.go), as
# recorded; each node OS says under which domain its nodes carry them (warmstart/node_os/).
KARPENTER_DOMAIN = "karpenter.k8s.aws/"
GPU_MANUFACTURER_LABEL = f"{KARPENTER_DOMAIN}instance-gpu-manufacturer"
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"  # nvcr.io/nvidia/k8s-device-plugin, NVIDIA's chart and the GPU Operator's
# An add-on's configuration values are a small document; anything larger is not read (it is the cluster's text).
CONFIGURATION_VALUES_MAX = 2**16


def field(document: Any, *path: str) -> Any:
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def items_of(answer: Any) -> list[dict]:
    items = field(answer, "items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _containers(item: dict) -> list[dict]:
    containers = field(item, "spec", "template", "spec", "containers")
    return [c for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []


def _named(daemonsets: Any, namespace: str, name: str) -> bool:
    return any(
        field(d, "metadata", "namespace") == namespace and field(d, "metadata", "name") == name
        for d in items_of(daemonsets)
    )


def pod_identity_findings(config: EnvironmentConfig, addon: Any, daemonsets: Any) -> tuple[list[Problem], list[str]]:
    """addon: DescribeAddon's `addon`, {} when there is no such EKS add-on, None when unreadable."""
    existing = config.cluster.existing
    assert existing is not None
    name, region = config.cluster.name, config.region
    if addon is None:
        return [], ["could not read the eks-pod-identity-agent add-on; its check was skipped"]
    as_daemonset = _named(daemonsets, "kube-system", "eks-pod-identity-agent") if daemonsets is not None else None
    there = bool(addon) or bool(as_daemonset)
    if existing.pod_identity_agent == "add" and there:
        how = "EKS add-on" if addon else "DaemonSet kube-system/eks-pod-identity-agent"
        return [
            Problem(
                "",
                f"cluster {name} runs the Pod Identity agent already ({how}): a second install fails the deploy",
                "set cluster.existing.pod_identity_agent: present",
            )
        ], []
    if existing.pod_identity_agent != "present" or there:
        return [], []
    if as_daemonset is None:
        return [], [f"cluster {name} has no eks-pod-identity-agent EKS add-on, and its DaemonSets could not be read"]
    return [
        Problem(
            "",
            f"cluster {name} runs no Pod Identity agent: no warmstart pod (agent, models) would get its AWS role",
            "set cluster.existing.pod_identity_agent: add, or aws eks create-addon --cluster-name "
            f"{name} --region {region} --addon-name eks-pod-identity-agent",
        )
    ], []


def _policy_switch(values: Any) -> bool:
    """`enableNetworkPolicy` of the vpc-cni add-on's configuration values (JSON or YAML, as EKS takes both)."""
    if not isinstance(values, str) or len(values) > CONFIGURATION_VALUES_MAX:
        return False
    try:
        parsed = yaml.safe_load(values)
    except (yaml.YAMLError, RecursionError):  # nested past the parser's depth: not a setting warmstart can read
        return False
    return str(field(parsed, "enableNetworkPolicy")).lower() == "true"


def _aws_node_enforces(daemonsets: Any) -> bool | None:
    """The self-managed VPC CNI's `aws-network-policy-agent --enable-network-policy=true`; None: no aws-node."""
    aws_node = [d for d in items_of(daemonsets) if field(d, "metadata", "name") == "aws-node"]
    if not aws_node:
        return None
    for container in _containers(aws_node[0]):
        args = container.get("args")
        if isinstance(args, list) and "--enable-network-policy=true" in args:
            return True
    return False


def network_policy_findings(config: EnvironmentConfig, addon: Any, daemonsets: Any) -> tuple[list[Problem], list[str]]:
    """addon: DescribeAddon's `addon` for vpc-cni, {} when there is none, None when unreadable."""
    name, region = config.cluster.name, config.region
    if addon is None:
        return [], ["could not read the vpc-cni add-on; NetworkPolicy enforcement was not checked"]
    ignored = (
        f"cluster {name}'s VPC CNI does not enforce NetworkPolicy: warmstart's policies (who may call the models, "
        "scrape the agent) would be written and ignored"
    )
    if addon:
        if _policy_switch(field(addon, "configurationValues")):
            return [], []
        fix = (
            f"aws eks update-addon --cluster-name {name} --region {region} --addon-name vpc-cni "
            '--configuration-values \'{"enableNetworkPolicy": "true"}\' (with your other values: they are replaced)'
        )
        return [Problem("", ignored, fix)], []
    if daemonsets is None:
        return [], [
            "vpc-cni is not an EKS add-on here, and the DaemonSets could not be read: check your CNI enforces"
            " NetworkPolicy"
        ]
    enforced = _aws_node_enforces(daemonsets)
    if enforced is None:
        return [], [
            "the cluster's CNI is not the VPC CNI (no aws-node DaemonSet): check that it enforces NetworkPolicy"
        ]
    if enforced:
        return [], []
    fix = "run aws-node's aws-network-policy-agent container with --enable-network-policy=true (VPC CNI 1.14 or later)"
    return [Problem("", ignored, fix)], []


def _tolerates(toleration: Any, taint: dict[str, str]) -> bool:
    """The scheduler's rule (k8s.io/api core/v1 Toleration.ToleratesTaint): an empty effect matches every effect;
    an empty key with Exists matches every taint; Exists matches the key, Equal (the default) key and value."""
    if not isinstance(toleration, dict) or toleration.get("effect") not in (None, "", taint["effect"]):
        return False
    key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
    if key in (None, ""):
        return operator == "Exists"
    if key != taint["key"]:
        return False
    return operator == "Exists" or (operator == "Equal" and toleration.get("value", "") == taint.get("value", ""))


def tolerates_pool_taints(pod_spec: Any) -> bool:
    tolerations = field(pod_spec, "tolerations") or []
    return all(any(_tolerates(t, taint) for t in tolerations) for taint in POOL_TAINTS)


def _matches(expression: Any, labels: dict[str, str]) -> bool:
    key, operator, values = field(expression, "key"), field(expression, "operator"), field(expression, "values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and isinstance(values, list) and len(values) == 1:
        # Integers on both sides, else no match (k8s.io/component-helpers nodeaffinity: a parse error matches nothing).
        bound, value = _integer(values[0]), _integer(labels.get(key))
        if bound is None or value is None:
            return False
        return value > bound if operator == "Gt" else value < bound
    return False  # unknown: not assumed to hold


def _integer(text: Any) -> int | None:
    return int(text) if isinstance(text, str) and re.fullmatch(r"-?[0-9]{1,18}", text) else None


def runs_on(pod_spec: Any, labels: dict[str, str]) -> bool:
    """Whether a pod template schedules on a node with these labels: its nodeSelector and its required node
    affinity (any term; every expression of a term), as the scheduler's NodeAffinity filter reads them."""
    selector = field(pod_spec, "nodeSelector") or {}
    if not isinstance(selector, dict) or any(labels.get(k) != v for k, v in selector.items()):
        return False
    terms = field(
        pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"
    )
    if not terms:
        return True
    return any(
        isinstance(term, dict) and all(_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def gpu_node_label_sets(config: EnvironmentConfig) -> list[dict[str, str]]:
    """The labels a warmstart GPU node can have, one set per instance type, capacity type and zone of the pool: the
    pool's template label and name, the well-known labels, and the instance type's own as Karpenter records them
    (karpenter_instance_types.json; Auto Mode's under eks.amazonaws.com/, with its compute type)."""
    pool, node_os = config.compute.gpu_pool, config.compute.node_os
    figures = karpenter_figures()
    base = {
        GPU_POOL_LABEL[0]: GPU_POOL_LABEL[1],
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/region": config.region,
        "karpenter.sh/nodepool": gpu_node_pool_name(config.compute.mode, existing_cluster=not config.cluster.owned),
        **node_os.node_labels,
    }
    sets = []
    for instance_type in pool.instance_types:
        recorded = figures[instance_type].labels if instance_type in figures else {GPU_MANUFACTURER_LABEL: "nvidia"}
        own = {node_os.instance_label_domain + k.removeprefix(KARPENTER_DOMAIN): v for k, v in recorded.items()}
        for capacity_type in pool.capacity_types:
            zones: list[str | None] = list(config.network.zones) or [None]
            for zone in zones:
                labels = {
                    **base,
                    **own,
                    "node.kubernetes.io/instance-type": instance_type,
                    "karpenter.sh/capacity-type": capacity_type,
                }
                if zone:
                    labels["topology.kubernetes.io/zone"] = zone
                sets.append(labels)
    return sets


def device_plugin_findings(config: EnvironmentConfig, daemonsets: Any) -> tuple[list[Problem], list[str]]:
    existing = config.cluster.existing
    assert existing is not None
    if daemonsets is None:
        return [], ["the cluster's DaemonSets could not be read: the NVIDIA device plugin was not checked"]
    plugins = [
        d
        for d in items_of(daemonsets)
        if any(DEVICE_PLUGIN_IMAGE in str(c.get("image")) for c in _containers(d))
        or "nvidia-device-plugin" in str(field(d, "metadata", "name"))
    ]
    names = ", ".join(f"{field(d, 'metadata', 'namespace')}/{field(d, 'metadata', 'name')}" for d in plugins)
    if existing.nvidia_device_plugin == "add" and plugins:
        return [
            Problem(
                "",
                f"an NVIDIA device plugin runs already ({names}): a second would advertise the GPUs twice, and "
                "warmstart's Helm release would take over one named nvidia-device-plugin",
                "set cluster.existing.nvidia_device_plugin: present",
            )
        ], []
    if existing.nvidia_device_plugin != "present":
        return [], []
    label_sets = gpu_node_label_sets(config)
    taints = " and ".join(f"{t['key']}:{t['effect']}" for t in POOL_TAINTS)
    if any(
        tolerates_pool_taints(field(d, "spec", "template", "spec"))
        and all(runs_on(field(d, "spec", "template", "spec"), labels) for labels in label_sets)
        for d in plugins
    ):
        return [], []
    what = (
        f"the NVIDIA device plugin ({names}) would not run on warmstart's GPU nodes (their taints {taints}, or a "
        "node affinity their labels do not meet)"
        if plugins
        else "no NVIDIA device plugin runs in the cluster"
    )
    return [
        Problem(
            "",
            f"{what}: no node would offer nvidia.com/gpu, and every model pod would stay Pending",
            "set cluster.existing.nvidia_device_plugin: add (warmstart installs NVIDIA's chart with those "
            f"tolerations and node affinity), or give your plugin tolerations of {taints} (operator: Exists) and node "
            f"affinity that admits {GPU_MANUFACTURER_LABEL}=nvidia",
        )
    ], []


def image_tag(image: Any) -> str:
    """The tag of an image reference (registry[:port]/repository[:tag][@digest]); '' when it has none."""
    if not isinstance(image, str):
        return ""
    name = image.split("@", 1)[0]
    tag = name.rpartition(":")[2] if ":" in name else ""
    return "" if "/" in tag else tag


def _karpenter_controllers(deployments: Any) -> list[tuple[str, dict]]:
    """(namespace, controller container) of every Karpenter Deployment."""
    return [
        (str(field(item, "metadata", "namespace")), container)
        for item in items_of(deployments)
        if field(item, "metadata", "labels", "app.kubernetes.io/name") == "karpenter"
        for container in _containers(item)
        if container.get("name") == "controller"
    ]


def karpenter_findings(config: EnvironmentConfig, deployments: Any) -> tuple[list[Problem], list[str]]:
    """The cluster's Karpenter Deployments (all namespaces) against compute.existing_controller, or, where warmstart
    installs its own, that none runs."""
    compute = config.compute
    assert isinstance(compute, KarpenterCompute)
    if deployments is None:
        return [], ["the cluster's Deployments could not be read: Karpenter's version and settings were not checked"]
    controllers = _karpenter_controllers(deployments)
    said = compute.existing_controller
    if said is None:
        if not controllers:
            return [], []
        return [
            Problem(
                "",
                f"a Karpenter runs already (namespace {controllers[0][0]}): warmstart's own would take over its Helm "
                "release or fight it for the same NodeClaims",
                "describe it under compute.existing_controller (its version and node role) instead",
            )
        ], []
    mine = [container for namespace, container in controllers if namespace == said.namespace]
    if not mine:
        return [
            Problem(
                "",
                f"no Karpenter controller in namespace {said.namespace} of cluster {config.cluster.name}",
                "set compute.existing_controller.namespace to where it runs, or remove existing_controller to let "
                "warmstart install its own",
            )
        ], []
    return _controller_settings(config, compute, mine[0]), []


def karpenter_vm_memory_overhead(config: EnvironmentConfig, deployments: Any) -> float | None:
    """The existing Karpenter's VM_MEMORY_OVERHEAD_PERCENT (its --vm-memory-overhead-percent), where set and a
    number from 0 to 1; None otherwise (its default, 0.075, which the node model takes)."""
    compute = config.compute
    if not isinstance(compute, KarpenterCompute) or compute.existing_controller is None:
        return None
    for namespace, container in _karpenter_controllers(deployments):
        if namespace != compute.existing_controller.namespace or not isinstance(container.get("env"), list):
            continue
        for variable in container["env"]:
            value = variable.get("value") if isinstance(variable, dict) else None
            if variable.get("name") == "VM_MEMORY_OVERHEAD_PERCENT" and isinstance(value, str):
                if re.fullmatch(r"0?\.[0-9]{1,6}|0|1(\.0{1,6})?", value):
                    return float(value)
    return None


def _controller_settings(config: EnvironmentConfig, compute: KarpenterCompute, container: dict) -> list[Problem]:
    assert compute.existing_controller is not None
    said = compute.existing_controller
    image = container.get("image")
    tag = image_tag(image).lstrip("v")
    env_list = container.get("env")
    env = {e.get("name"): e.get("value") for e in env_list if isinstance(e, dict)} if isinstance(env_list, list) else {}
    found: list[Problem] = []
    if tag != said.version:
        found.append(
            Problem(
                "",
                f"the cluster runs Karpenter {shown(str(tag or image))}, and compute.existing_controller.version says "
                f"{said.version}",
                f"set compute.existing_controller.version: {shown(tag) if tag else '<its version>'}",
            )
        )
    if env.get("CLUSTER_NAME") not in (None, config.cluster.name):
        found.append(
            Problem(
                "",
                f"the Karpenter in {said.namespace} manages cluster {shown(str(env.get('CLUSTER_NAME')))}",
                "name the cluster it runs in under cluster.name",
            )
        )
    gates = str(env.get("FEATURE_GATES") or "")
    if "reserved" in compute.gpu_pool.capacity_types and "ReservedCapacity=false" in gates:
        found.append(
            Problem(
                "",
                "the pool asks for reserved capacity, and the Karpenter controller runs with ReservedCapacity=false: "
                "it would never launch into the reservations",
                "turn the feature gate on (Helm value settings.featureGates.reservedCapacity: true), or remove "
                "reserved from compute.gpu_pool.capacity_types",
            )
        )
    return found


def node_access_findings(
    config: EnvironmentConfig, entry_type: Any, mode: Any, aws_auth: Any
) -> tuple[list[Problem], list[str]]:
    """The existing Karpenter's node role lets its nodes join: an EC2_LINUX access entry (entry_type: its type, ''
    when the role has no entry, None when unreadable), or an aws-auth mapping where the mode allows the ConfigMap."""
    compute = config.compute
    assert isinstance(compute, KarpenterCompute) and compute.existing_controller is not None
    role = compute.existing_controller.node_role_name
    if entry_type is None:
        return [], [f"could not read the access entries: node role {role} was not checked"]
    if entry_type == "EC2_LINUX":
        return [], []
    if entry_type:
        return [
            Problem(
                "",
                f"node role {role}'s access entry is of type {entry_type}: nodes need EC2_LINUX to join",
                "recreate it with --type EC2_LINUX (aws eks delete-access-entry, then create-access-entry)",
            )
        ], []
    if mode == "API_AND_CONFIG_MAP":
        if aws_auth is None:
            return [], [f"node role {role} has no access entry, and aws-auth could not be read: check its mapping"]
        roles = field(aws_auth, "data", "mapRoles")
        mapped = rf"rolearn:\s*arn:[^\s]*:role/(?:[^\s]*/)?{re.escape(role)}\s*$"
        if isinstance(roles, str) and re.search(mapped, roles, re.MULTILINE):
            return [], []
    return [
        Problem(
            "",
            f"node role {role} has no access entry (nor an aws-auth mapping): the GPU nodes Karpenter launches for "
            "warmstart would never join, and it would keep replacing them",
            f"aws eks create-access-entry --cluster-name {config.cluster.name} --region {config.region} "
            f"--principal-arn arn:aws:iam::{config.account}:role/{role} --type EC2_LINUX",
        )
    ], []
