"""The vLLM pod of a model: the entry step in front of vLLM, the compile cache and the node copy on the node's
NVMe, the restore wait, probes, and where the pod may run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdk8s_plus_33 import k8s

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
    isolated_pod_spec,
    locked_down,
    pod_security,
)
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
    _node_copy(parts, plan)
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
    """The entry step records what the pod finds and chooses (for the agent), serves the node's node copy on
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


def _node_copy(parts: PodParts, plan: ModelPlan) -> None:
    """The node's verified node copy, read-only."""
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
