"""One served model: Namespace, ServiceAccount, Deployment, Service and PodDisruptionBudget.

Built with the generated L1 classes: cdk8s-plus cannot request nvidia.com/gpu and injects CPU limits.
Every value comes from the model's plan (`warmstart.workload.plan_model`).
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s.gpu_nodes import GPU_NODE_POOL, GPU_TAINT
from warmstart.workload import (
    AGENT_STATE_FOLDER,
    COMPILE_CACHE_MOUNT,
    DONE_MARKERS,
    VLLM_PORT,
    ModelPlan,
    done_marker_name,
    vllm_args,
    vllm_env,
)

SERVICE_ACCOUNT = "vllm"
VLLM_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
AGENT_STATE_MOUNT = "/warmstart"
# Waits for the node agent's done marker, never longer than the bound, and never fails: with the agent
# broken or absent the pod starts (and compiles) as it would without warmstart.
WAIT_FOR_RESTORE = """\
end=$(( $(date +%s) + ${WAIT_SECONDS} ))
while [ ! -e "$MARKER" ]; do
  if [ "$(date +%s)" -ge "$end" ]; then
    echo "warmstart: no compile-cache restore after ${WAIT_SECONDS}s; vLLM will compile locally"
    exit 0
  fi
  sleep 1
done
echo "warmstart: compile-cache restore finished: $(cat "$MARKER")"
"""


def model_labels(model_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": model_name,
        "app.kubernetes.io/part-of": "warmstart",
    }


class VllmModel(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, plan: ModelPlan) -> None:
        super().__init__(scope, id)
        name = plan.model.name
        labels = model_labels(name)
        self.namespace_object = k8s.KubeNamespace(self, "Namespace", metadata=k8s.ObjectMeta(name=name, labels=labels))
        # No eks.amazonaws.com/role-arn annotation: the role comes from a Pod Identity association.
        self.service_account = k8s.KubeServiceAccount(
            self, "ServiceAccount", metadata=k8s.ObjectMeta(name=SERVICE_ACCOUNT, namespace=name, labels=labels)
        )
        self.deployment = k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.DeploymentSpec(
                replicas=plan.model.replicas,
                selector=k8s.LabelSelector(match_labels=labels),
                # A new pod must be Ready before an old one goes: no serving gap during a roll.
                strategy=k8s.DeploymentStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDeployment(
                        max_surge=k8s.IntOrString.from_number(1), max_unavailable=k8s.IntOrString.from_number(0)
                    ),
                ),
                template=k8s.PodTemplateSpec(metadata=k8s.ObjectMeta(labels=labels), spec=pod_spec(plan)),
            ),
        )
        self.service = k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.ServiceSpec(
                selector=labels,
                ports=[
                    k8s.ServicePort(
                        name="http", port=VLLM_PORT, target_port=k8s.IntOrString.from_string("http"), protocol="TCP"
                    )
                ],
            ),
        )
        self.disruption_budget = k8s.KubePodDisruptionBudget(
            self,
            "DisruptionBudget",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1), selector=k8s.LabelSelector(match_labels=labels)
            ),
        )
        for obj in (self.service_account, self.deployment, self.service, self.disruption_budget):
            obj.add_dependency(self.namespace_object)


def pod_spec(plan: ModelPlan) -> k8s.PodSpec:
    volumes = [
        k8s.Volume(
            name="dshm",
            empty_dir=k8s.EmptyDirVolumeSource(
                medium="Memory", size_limit=k8s.Quantity.from_string(f"{plan.model.shared_memory_gib}Gi")
            ),
        )
    ]
    mounts = [k8s.VolumeMount(name="dshm", mount_path="/dev/shm")]
    if plan.compile_host_path:
        volumes.append(
            k8s.Volume(
                name="compile-cache",
                host_path=k8s.HostPathVolumeSource(path=plan.compile_host_path, type="DirectoryOrCreate"),
            )
        )
        mounts.append(k8s.VolumeMount(name="compile-cache", mount_path=COMPILE_CACHE_MOUNT))
    init_containers = []
    if plan.compile_cache and plan.restore_wait_seconds > 0:
        volumes.append(
            k8s.Volume(
                name="warmstart-state",
                host_path=k8s.HostPathVolumeSource(
                    path=f"{plan.compile_cache_root}/{AGENT_STATE_FOLDER}", type="DirectoryOrCreate"
                ),
            )
        )
        init_containers.append(wait_for_restore(plan))
    gpus = k8s.Quantity.from_number(plan.gpus)
    container = k8s.Container(
        name="vllm",
        image=plan.model.image,
        command=VLLM_COMMAND,
        args=vllm_args(plan),
        env=[k8s.EnvVar(name=key, value=value) for key, value in vllm_env(plan).items()],
        ports=[k8s.ContainerPort(name="http", container_port=VLLM_PORT, protocol="TCP")],
        resources=k8s.ResourceRequirements(
            requests={
                "cpu": k8s.Quantity.from_string(f"{plan.cpu:g}"),
                "memory": k8s.Quantity.from_string(f"{plan.memory_gib}Gi"),
                "nvidia.com/gpu": gpus,
            },
            limits={"nvidia.com/gpu": gpus},
        ),
        volume_mounts=mounts,
        # Loading and compiling take minutes: the startup probe allows 30 s + 60 x 10 s before liveness matters.
        startup_probe=k8s.Probe(
            http_get=k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http")),
            initial_delay_seconds=30,
            period_seconds=10,
            failure_threshold=60,
        ),
        readiness_probe=k8s.Probe(
            http_get=k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http")),
            period_seconds=5,
            timeout_seconds=3,
        ),
    )
    return k8s.PodSpec(
        service_account_name=SERVICE_ACCOUNT,
        init_containers=init_containers or None,
        containers=[container],
        volumes=volumes,
        node_selector={"karpenter.sh/nodepool": GPU_NODE_POOL},
        affinity=_instance_type_affinity(plan),
        tolerations=[k8s.Toleration(key=GPU_TAINT["key"], operator="Exists", effect=GPU_TAINT["effect"])],
        termination_grace_period_seconds=60,
    )


def wait_for_restore(plan: ModelPlan) -> k8s.Container:
    """Runs the serving image (already being pulled) so the wait costs no extra image pull."""
    marker = f"{AGENT_STATE_MOUNT}/{DONE_MARKERS}/{done_marker_name(plan.model.name, plan.factors.fingerprint())}"
    return k8s.Container(
        name="wait-for-compile-cache",
        image=plan.model.image,
        command=["/bin/sh", "-c", WAIT_FOR_RESTORE],
        env=[
            k8s.EnvVar(name="MARKER", value=marker),
            k8s.EnvVar(name="WAIT_SECONDS", value=str(plan.restore_wait_seconds)),
        ],
        volume_mounts=[k8s.VolumeMount(name="warmstart-state", mount_path=AGENT_STATE_MOUNT, read_only=True)],
        resources=k8s.ResourceRequirements(
            requests={"cpu": k8s.Quantity.from_string("10m"), "memory": k8s.Quantity.from_string("16Mi")},
            limits={"memory": k8s.Quantity.from_string("64Mi")},
        ),
    )


def _instance_type_affinity(plan: ModelPlan) -> k8s.Affinity | None:
    if not plan.model.instance_types:
        return None
    return k8s.Affinity(
        node_affinity=k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
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
        )
    )
