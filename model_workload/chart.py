"""One served model: Namespace, ServiceAccount, Deployment, Service and PodDisruptionBudget.

Built with the generated L1 classes: cdk8s-plus cannot request nvidia.com/gpu and injects CPU limits.
Every value comes from the model's plan (`warmstart.workload.plan_model`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.agent_settings import WEIGHTS_LABEL_DOMAIN
from contracts.node_layout import AGENT_STATE_FOLDER, DONE_MARKERS, done_marker_name
from contracts.pod_labels import (
    RESTORE_WAIT_CONTAINER,
    VLLM_CONTAINER,
    gpu_pool_selector,
    model_labels,
)
from kube.gpu_nodes import pool_k8s_tolerations
from kube.hardening import (
    NOBODY,
    RUNS_AS_ROOT,
    WRITABLE_ROOT,
    departure,
    isolated_pod_spec,
    locked_down,
    pod_security,
    scanner_annotations,
)
from kube.pod_security import MODEL_LEVEL, pod_security_labels
from kube.scraping import scrape_annotations
from warmstart.autoscaling import MONITORING_NAMESPACE, PROMETHEUS_SERVER_LABELS, ScalingPolicy
from warmstart.workload import (
    COMPILE_CACHE_MOUNT,
    POD_RECORDS_MOUNT,
    PRESTOP_SLEEP_SECONDS,
    PROBE_INITIAL_DELAY_SECONDS,
    PROBE_PERIOD_SECONDS,
    TERMINATION_GRACE_SECONDS,
    VLLM_ASSETS_MOUNT,
    VLLM_PORT,
    ModelPlan,
    vllm_args,
    vllm_env,
)

SERVICE_ACCOUNT = "vllm"
# The downward API variable kubelet expands the pod-records mount's subPathExpr with.
POD_UID_VARIABLE = "POD_UID"
AGENT_STATE_MOUNT = "/warmstart"
WEIGHTS_MOUNT = "/warmstart-weights"
ENTRY_MOUNT = "/warmstart-entry"
RUNTIME = Path(__file__).resolve().parent / "runtime"
# The entry step, the loopback S3 endpoint it starts and the vLLM plugin that streams the node copy as local files
# (with its dist-info, which vLLM finds once the entry step puts the folder on PYTHONPATH), by their paths in the
# mounted folder: standard library only (the plugin imports vLLM when vLLM calls it), run by the serving image.
PLUGIN_DIST_INFO = "warmstart_node_copy-1.0.dist-info"
ENTRY_FILES = {
    name: RUNTIME / name
    for name in (
        "vllm_entry.py",
        "node_copy_s3.py",
        "node_copy_loader.py",
        f"{PLUGIN_DIST_INFO}/METADATA",
        f"{PLUGIN_DIST_INFO}/entry_points.txt",
    )
}
# Shared with the agent: the endpoints' connection bounds, and the identities of a verified copy's files.
ENTRY_FILES |= {
    name: RUNTIME.parent.parent / "contracts" / name for name in ("connection_guard.py", "file_identity.py")
}


def entry_key(path: str) -> str:
    """A ConfigMap key has no `/`: a file below the mount is projected to its path by the volume's items."""
    return path.replace("/", ".")


# Waits for the node agent's done marker, at least the bound and at most a second more (date +%s counts whole
# seconds, so "-ge" at start + bound could give up almost a second early), and never fails: with the agent
# broken or absent the pod starts (and compiles) as it would without warmstart.
WAIT_FOR_RESTORE = """\
end=$(( $(date +%s) + ${WAIT_SECONDS} ))
while [ ! -e "$MARKER" ]; do
  if [ "$(date +%s)" -gt "$end" ]; then
    echo "warmstart: no compile-cache restore after ${WAIT_SECONDS}s; vLLM will compile locally"
    exit 0
  fi
  sleep 1
done
echo "warmstart: compile-cache restore finished: $(cat "$MARKER")"
"""


class VllmModel(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, plan: ModelPlan, scaling: ScalingPolicy | None = None) -> None:
        super().__init__(scope, id)
        name = plan.model.name
        labels = model_labels(name)
        namespace_labels = {**labels, **pod_security_labels(MODEL_LEVEL, plan.kubernetes_version)}
        self.namespace_object = k8s.KubeNamespace(
            self, "Namespace", metadata=k8s.ObjectMeta(name=name, labels=namespace_labels)
        )
        # No eks.amazonaws.com/role-arn annotation: the role comes from a Pod Identity association.
        self.service_account = k8s.KubeServiceAccount(
            self, "ServiceAccount", metadata=k8s.ObjectMeta(name=SERVICE_ACCOUNT, namespace=name, labels=labels)
        )
        self.entry_script = None
        if plan.entry_step:
            self.entry_script = k8s.KubeConfigMap(
                self,
                "EntryScript",
                metadata=k8s.ObjectMeta(name="warmstart-entry", namespace=name, labels=labels),
                data={entry_key(file): path.read_text() for file, path in ENTRY_FILES.items()},
            )
            self.entry_script.add_dependency(self.namespace_object)
        self.deployment = k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels, annotations=DEPLOYMENT_ANNOTATIONS),
            spec=_deployment_spec(plan, scaling, labels),
        )
        self.service = k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.ServiceSpec(selector=labels, ports=[_http_port()]),
        )
        self.disruption_budget = k8s.KubePodDisruptionBudget(
            self,
            "DisruptionBudget",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1), selector=k8s.LabelSelector(match_labels=labels)
            ),
        )
        # Only the listed client namespaces (and the model's own) reach the serving port; the AWS network
        # policy agent always admits the node's own IP, so kubelet's probes still arrive (aws-network-policy-agent
        # PR #65, "Ignore policy restrictions against Node IP").
        self.network_policy = k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k8s.ObjectMeta(name="vllm-clients", namespace=name, labels=labels),
            spec=_clients_only(plan, scaling, labels),
        )
        for obj in (self.service_account, self.deployment, self.service, self.disruption_budget, self.network_policy):
            obj.add_dependency(self.namespace_object)
        if self.entry_script is not None:
            self.deployment.add_dependency(self.entry_script)


def _http_port() -> k8s.ServicePort:
    return k8s.ServicePort(name="http", port=VLLM_PORT, target_port=k8s.IntOrString.from_string("http"), protocol="TCP")


def _deployment_spec(plan: ModelPlan, scaling: ScalingPolicy | None, labels: dict[str, str]) -> k8s.DeploymentSpec:
    return k8s.DeploymentSpec(
        # An autoscaled model's count is the autoscaler's: a count here would be applied again on
        # every deploy (the Deployment starts at 1, then the autoscaler raises it to min_replicas).
        replicas=None if scaling else plan.model.replicas,
        selector=k8s.LabelSelector(match_labels=labels),
        # The new pod first (no serving gap) when the pool's GPU limit leaves a node for it; otherwise
        # one pod at a time, as the plan says.
        strategy=k8s.DeploymentStrategy(
            type="RollingUpdate",
            rolling_update=k8s.RollingUpdateDeployment(
                max_surge=k8s.IntOrString.from_number(1 if plan.surge else 0),
                max_unavailable=k8s.IntOrString.from_number(0 if plan.surge else 1),
            ),
        ),
        template=k8s.PodTemplateSpec(
            metadata=k8s.ObjectMeta(labels=labels, annotations=_template_annotations(plan, scaling)),
            spec=pod_spec(plan),
        ),
    )


def _clients_only(plan: ModelPlan, scaling: ScalingPolicy | None, labels: dict[str, str]) -> k8s.NetworkPolicySpec:
    name = plan.model.name
    return k8s.NetworkPolicySpec(
        pod_selector=k8s.LabelSelector(match_labels=labels),
        policy_types=["Ingress"],
        ingress=[
            k8s.NetworkPolicyIngressRule(
                from_=[
                    k8s.NetworkPolicyPeer(
                        namespace_selector=k8s.LabelSelector(
                            match_expressions=[
                                k8s.LabelSelectorRequirement(
                                    key="kubernetes.io/metadata.name",
                                    operator="In",
                                    values=sorted({name, *plan.client_namespaces}),
                                )
                            ]
                        )
                    ),
                    # An autoscaled model's Prometheus reads /metrics on the same port (its server only).
                    *([_prometheus_server()] if scaling else []),
                ],
                ports=[k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(VLLM_PORT), protocol="TCP")],
            )
        ],
    )


DEPLOYMENT_ANNOTATIONS = scanner_annotations(
    [
        departure(
            RUNS_AS_ROOT,
            "the vLLM serving image runs as root (it has no other user); no capabilities, no "
            "privilege escalation, seccomp RuntimeDefault",
        ),
        departure(
            WRITABLE_ROOT,
            "vLLM, Triton, FlashInfer and torch write caches and IPC sockets under $HOME and the "
            "temporary folder; not verified to run on a read-only root",
        ),
    ],
    host_paths="node NVMe folders of warmstart: the torch.compile cache, the weights copy (read-only), the pods' "
    "entry records; they are what makes a start on this node fast",
)


def _template_annotations(plan: ModelPlan, scaling: ScalingPolicy | None) -> dict[str, str] | None:
    """A new entry step rolls the pods, like any other change of what they run; an autoscaled model's pods are
    scraped (vLLM's /metrics on the serving port) by the environment's Prometheus."""
    annotations = {}
    if plan.entry_step:
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in ENTRY_FILES.values())).hexdigest()
        annotations["warmstart.io/entry-sha256"] = digest
    if scaling:
        annotations.update(scrape_annotations(VLLM_PORT))
    return annotations or None


def _prometheus_server() -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(
        namespace_selector=k8s.LabelSelector(match_labels={"kubernetes.io/metadata.name": MONITORING_NAMESPACE}),
        pod_selector=k8s.LabelSelector(match_labels=PROMETHEUS_SERVER_LABELS),
    )


class VllmAutoscaler(cdk8s.Chart):
    """The model's HorizontalPodAutoscaler, in a chart (and a manifest) of its own: kubectl's prune leaves
    autoscaling/v2 objects alone, so turning autoscaling off must delete this manifest, not drop an object from
    the workload's."""

    def __init__(self, scope: Construct, id: str, *, scaling: ScalingPolicy) -> None:
        super().__init__(scope, id)
        self.autoscaler = _autoscaler(self, scaling, scaling.model, model_labels(scaling.model))


def _autoscaler(
    chart: Construct, scaling: ScalingPolicy, namespace: str, labels: dict[str, str]
) -> k8s.KubeHorizontalPodAutoscalerV2:
    """Replicas on vLLM's per-pod load (the custom metrics API, prometheus-adapter), with the policy derived from
    the model's start time (warmstart.autoscaling)."""
    target = k8s.Quantity.from_string(_quantity(scaling.target))
    behavior = scaling.behavior()

    def rules(direction: str) -> k8s.HpaScalingRulesV2:
        spec = behavior[direction]
        return k8s.HpaScalingRulesV2(
            stabilization_window_seconds=spec["stabilizationWindowSeconds"],
            select_policy=spec["selectPolicy"],
            policies=[
                k8s.HpaScalingPolicyV2(type=p["type"], value=p["value"], period_seconds=p["periodSeconds"])
                for p in spec["policies"]
            ],
        )

    return k8s.KubeHorizontalPodAutoscalerV2(
        chart,
        "Autoscaler",
        metadata=k8s.ObjectMeta(name="vllm", namespace=namespace, labels=labels),
        spec=k8s.HorizontalPodAutoscalerSpecV2(
            scale_target_ref=k8s.CrossVersionObjectReferenceV2(api_version="apps/v1", kind="Deployment", name="vllm"),
            min_replicas=scaling.min_replicas,
            max_replicas=scaling.max_replicas,
            metrics=[
                k8s.MetricSpecV2(
                    type="Pods",
                    pods=k8s.PodsMetricSourceV2(
                        metric=k8s.MetricIdentifierV2(name=scaling.metric),
                        target=k8s.MetricTargetV2(type="AverageValue", average_value=target),
                    ),
                )
            ],
            behavior=k8s.HorizontalPodAutoscalerBehaviorV2(scale_up=rules("scaleUp"), scale_down=rules("scaleDown")),
        ),
    )


def _quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in thousandths (0.8 -> 800m)."""
    return f"{value:g}" if float(value).is_integer() else f"{round(value * 1000)}m"


def kubelet_literal(text: str) -> str:
    """`text` as kubelet passes it on: kubelet expands `$(NAME)` in env values and arguments against the
    container's variables and turns `$$` into `$`, so every `$` is doubled (a compilation config or a vLLM
    variable reaches vLLM exactly as configured and as the compile-cache key hashed it)."""
    return text.replace("$", "$$")


def _field(path: str) -> k8s.EnvVarSource:
    return k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path=path))


@dataclass
class PodParts:
    """A vLLM pod's parts, gathered one concern at a time (in the order they appear in the pod)."""

    volumes: list[k8s.Volume] = field(default_factory=list)
    mounts: list[k8s.VolumeMount] = field(default_factory=list)
    init_containers: list[k8s.Container] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_from_pod: list[k8s.EnvVar] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def pod_spec(plan: ModelPlan) -> k8s.PodSpec:
    parts = _scratch(plan)
    parts.command = list(plan.server_command)
    _compile_cache(parts, plan)
    parts.env = vllm_env(plan)
    _entry_step(parts, plan)
    _weights_copy(parts, plan)
    return isolated_pod_spec(
        service_account_name=SERVICE_ACCOUNT,
        # Credentials come from Pod Identity's own projected token; the pod never calls the Kubernetes API.
        automount_service_account_token=False,
        security_context=pod_security(),
        init_containers=parts.init_containers or None,
        containers=[_vllm_container(plan, parts)],
        volumes=parts.volumes,
        node_selector=gpu_pool_selector(),
        affinity=_affinity(plan),
        topology_spread_constraints=_zone_spread(plan),
        tolerations=pool_k8s_tolerations(),
        termination_grace_period_seconds=TERMINATION_GRACE_SECONDS,
    )


def _scratch(plan: ModelPlan) -> PodParts:
    """Shared memory for the tensor-parallel workers, and the folder vLLM pulls the model's config and tokenizer
    into (a fresh folder per pod: no stale file survives)."""
    shm = k8s.Quantity.from_string(f"{plan.model.shared_memory_gib}Gi")
    return PodParts(
        volumes=[
            k8s.Volume(name="dshm", empty_dir=k8s.EmptyDirVolumeSource(medium="Memory", size_limit=shm)),
            k8s.Volume(
                name="vllm-assets", empty_dir=k8s.EmptyDirVolumeSource(size_limit=k8s.Quantity.from_string("2Gi"))
            ),
        ],
        mounts=[
            k8s.VolumeMount(name="dshm", mount_path="/dev/shm"),
            k8s.VolumeMount(name="vllm-assets", mount_path=VLLM_ASSETS_MOUNT),
        ],
    )


def _compile_cache(parts: PodParts, plan: ModelPlan) -> None:
    """The configuration's compile-cache folder on the node, and the wait for the agent's restore."""
    if plan.compile_host_path:
        parts.volumes.append(
            k8s.Volume(
                name="compile-cache",
                host_path=k8s.HostPathVolumeSource(path=plan.compile_host_path, type="DirectoryOrCreate"),
            )
        )
        parts.mounts.append(k8s.VolumeMount(name="compile-cache", mount_path=COMPILE_CACHE_MOUNT))
    if plan.compile_cache and plan.restore_wait_seconds > 0:
        parts.volumes.append(
            k8s.Volume(
                name="warmstart-state",
                host_path=k8s.HostPathVolumeSource(
                    path=f"{plan.compile_cache_root}/{AGENT_STATE_FOLDER}", type="DirectoryOrCreate"
                ),
            )
        )
        parts.init_containers.append(wait_for_restore(plan))


def _entry_step(parts: PodParts, plan: ModelPlan) -> None:
    """The entry step records what the pod finds and chooses (for the agent), serves the node's weights copy on
    the pod's loopback when the agent vouches for it, then execs vLLM with unchanged arguments."""
    if not plan.entry_step:
        return
    parts.command = ["python3", f"{ENTRY_MOUNT}/vllm_entry.py", *plan.server_command]
    parts.env |= {"WARMSTART_POD_RECORDS": POD_RECORDS_MOUNT}
    if plan.compile_cache:
        parts.env |= {"WARMSTART_FINGERPRINT": plan.factors.fingerprint()}
    parts.env_from_pod = [k8s.EnvVar(name=POD_UID_VARIABLE, value_from=_field("metadata.uid"))]
    parts.volumes += [
        k8s.Volume(
            name="entry",
            config_map=k8s.ConfigMapVolumeSource(
                name="warmstart-entry", items=[k8s.KeyToPath(key=entry_key(f), path=f) for f in ENTRY_FILES]
            ),
        ),
        k8s.Volume(
            name="pod-records",
            host_path=k8s.HostPathVolumeSource(path=plan.pod_records_host_path, type="DirectoryOrCreate"),
        ),
    ]
    parts.mounts += [
        k8s.VolumeMount(name="entry", mount_path=ENTRY_MOUNT, read_only=True),
        # Only this pod's own folder, named by kubelet after the pod's UID: a pod speaks only for itself.
        k8s.VolumeMount(name="pod-records", mount_path=POD_RECORDS_MOUNT, sub_path_expr=f"$({POD_UID_VARIABLE})"),
    ]


def _weights_copy(parts: PodParts, plan: ModelPlan) -> None:
    """The node's verified weights copy, read-only."""
    if not plan.weights_cache:
        return
    parts.env |= {
        "WARMSTART_WEIGHTS_ROOT": WEIGHTS_MOUNT,
        "WARMSTART_WEIGHTS_MAX_AGE": str(plan.weights_max_age_seconds),
    }
    parts.volumes.append(
        k8s.Volume(
            name="weights",
            host_path=k8s.HostPathVolumeSource(path=plan.weights_host_path, type="DirectoryOrCreate"),
        )
    )
    parts.mounts.append(k8s.VolumeMount(name="weights", mount_path=WEIGHTS_MOUNT, read_only=True))


def _vllm_container(plan: ModelPlan, parts: PodParts) -> k8s.Container:
    startup, readiness, liveness = _health_probes(plan)
    gpus = k8s.Quantity.from_number(plan.gpus)
    memory = k8s.Quantity.from_string(f"{plan.memory_gib}Gi")
    return k8s.Container(
        name=VLLM_CONTAINER,
        image=plan.model.image,
        command=parts.command,
        args=[kubelet_literal(arg) for arg in vllm_args(plan)],
        env=[k8s.EnvVar(name=key, value=kubelet_literal(value)) for key, value in parts.env.items()]
        + parts.env_from_pod,
        ports=[k8s.ContainerPort(name="http", container_port=VLLM_PORT, protocol="TCP")],
        resources=k8s.ResourceRequirements(
            requests={"cpu": k8s.Quantity.from_string(f"{plan.cpu:g}"), "memory": memory, "nvidia.com/gpu": gpus},
            # Memory limit = request: the node never overcommits the memory the streamer's buffers count on.
            limits={"memory": memory, "nvidia.com/gpu": gpus},
        ),
        volume_mounts=parts.mounts,
        security_context=locked_down(read_only_root=False, run_as_user=None),
        # Requests routed before the endpoint is gone still arrive: wait before vLLM stops accepting them
        # (kubelet's own sleep action, Kubernetes 1.30+: no shell or binary needed in the image).
        lifecycle=k8s.Lifecycle(pre_stop=k8s.LifecycleHandler(sleep=k8s.SleepAction(seconds=PRESTOP_SLEEP_SECONDS))),
        startup_probe=startup,
        readiness_probe=readiness,
        liveness_probe=liveness,
    )


def _health_probes(plan: ModelPlan) -> tuple[k8s.Probe, k8s.Probe, k8s.Probe]:
    """Loading and compiling take minutes: the startup budget comes from the model (`warmstart plan`); liveness
    counts only after it."""
    health = k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http"))
    startup = k8s.Probe(
        http_get=health,
        initial_delay_seconds=PROBE_INITIAL_DELAY_SECONDS,
        period_seconds=PROBE_PERIOD_SECONDS,
        failure_threshold=plan.startup_failure_threshold,
    )
    readiness = k8s.Probe(http_get=health, period_seconds=5, timeout_seconds=3)
    liveness = k8s.Probe(http_get=health, period_seconds=10, timeout_seconds=5, failure_threshold=6)
    return startup, readiness, liveness


def _separate_nodes(plan: ModelPlan) -> k8s.PodAntiAffinity | None:
    """Replicas on separate nodes, the rollout's new pod included (a node's expiry or drift takes one replica,
    never all). Required anti-affinity, not a hostname spread: a spread's skew counts only the nodes that exist, so
    with one node it puts every replica there (kube-scheduler PodTopologySpread), where Karpenter and the scheduler
    both keep anti-affine pods apart, launching a node when none is free."""
    if plan.model.least_replicas < 2:
        return None
    return k8s.PodAntiAffinity(
        required_during_scheduling_ignored_during_execution=[
            k8s.PodAffinityTerm(
                topology_key="kubernetes.io/hostname",
                label_selector=k8s.LabelSelector(match_labels=model_labels(plan.model.name)),
            )
        ]
    )


def _zone_spread(plan: ModelPlan) -> list[k8s.TopologySpreadConstraint] | None:
    """Replicas over zones where the pool has room (a preference: a zone without capacity never blocks a pod)."""
    if plan.model.least_replicas < 2:
        return None
    selector = k8s.LabelSelector(match_labels=model_labels(plan.model.name))
    return [
        k8s.TopologySpreadConstraint(
            max_skew=1,
            topology_key="topology.kubernetes.io/zone",
            when_unsatisfiable="ScheduleAnyway",
            label_selector=selector,
        ),
    ]


def wait_for_restore(plan: ModelPlan) -> k8s.Container:
    """Runs the serving image (already being pulled) so the wait costs no extra image pull."""
    marker = f"{AGENT_STATE_MOUNT}/{DONE_MARKERS}/{done_marker_name(plan.model.name, plan.factors.fingerprint())}"
    return k8s.Container(
        name=RESTORE_WAIT_CONTAINER,
        image=plan.model.image,
        command=["/bin/sh", "-c", WAIT_FOR_RESTORE],
        env=[
            k8s.EnvVar(name="MARKER", value=marker),
            k8s.EnvVar(name="WAIT_SECONDS", value=str(plan.restore_wait_seconds)),
        ],
        volume_mounts=[k8s.VolumeMount(name="warmstart-state", mount_path=AGENT_STATE_MOUNT, read_only=True)],
        resources=k8s.ResourceRequirements(
            requests={"cpu": k8s.Quantity.from_string("10m"), "memory": k8s.Quantity.from_string("32Mi")},
            limits={"memory": k8s.Quantity.from_string("32Mi")},
        ),
        # It only reads a marker: no root, no writable root.
        security_context=locked_down(read_only_root=True, run_as_user=NOBODY),
    )


def _affinity(plan: ModelPlan) -> k8s.Affinity | None:
    node = _node_affinity(plan)
    apart = _separate_nodes(plan)
    if node is None and apart is None:
        return None
    return k8s.Affinity(node_affinity=node, pod_anti_affinity=apart)


def _node_affinity(plan: ModelPlan) -> k8s.NodeAffinity | None:
    """Required: the model's instance types (when restricted). Preferred, never required: nodes that hold
    its weights, so pods land warm when they can and still start anywhere else."""
    required = None
    if plan.model.instance_types:
        required = k8s.NodeSelector(
            node_selector_terms=[
                k8s.NodeSelectorTerm(
                    match_expressions=[
                        k8s.NodeSelectorRequirement(
                            key="node.kubernetes.io/instance-type",
                            operator="In",
                            values=list(plan.model.instance_types),
                        )
                    ]
                )
            ]
        )
    preferred = None
    if plan.weights_cache:
        preferred = [
            k8s.PreferredSchedulingTerm(
                weight=100,
                preference=k8s.NodeSelectorTerm(
                    match_expressions=[
                        k8s.NodeSelectorRequirement(
                            key=f"{WEIGHTS_LABEL_DOMAIN}/{plan.model.name}", operator="In", values=["ready"]
                        )
                    ]
                ),
            )
        ]
    if required is None and preferred is None:
        return None
    return k8s.NodeAffinity(
        required_during_scheduling_ignored_during_execution=required,
        preferred_during_scheduling_ignored_during_execution=preferred,
    )
