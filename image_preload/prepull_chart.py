"""Container image prepull: one DaemonSet per distinct serving image on the GPU pool, and its rollout gate.

The DaemonSet's init container runs the serving image and exits at once, so the kubelet pulls the image onto
every GPU node as the node joins; a tiny pause container then keeps the pod (and so the image) in place. It
never blocks a pod: a vLLM pod that starts first simply pulls as usual. Deployments that share an image share
its DaemonSet; it goes when no model uses the image.

The gate Job (`runtime/gate.py`, run from the agent image, one per image, named after it) waits, bounded, until
that DaemonSet is Ready on every node it targets; `cdk deploy` updates the image's Deployments only after the
Job succeeded, so a new image is on the existing GPU nodes before its pods roll.
"""

from __future__ import annotations

import hashlib
import json

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.pod_labels import gpu_pool_selector
from kube.gpu_nodes import pool_k8s_tolerations
from kube.hardening import (
    NEEDS_API_TOKEN,
    NO_LIVENESS,
    NO_READINESS,
    departure,
    isolated_pod_spec,
    locked_down,
    pod_security,
    scanner_annotations,
)
from warmstart.workload import image_gate_name, prepull_daemonset_name

PREPULL_LABEL = "warmstart.io/image-cache"
PAUSE_USER = 65535  # the pause image's own non-root user
ANNOTATIONS = scanner_annotations(
    [
        departure(NO_LIVENESS, "its only container is the pause process: nothing to probe; it holds the image"),
        departure(NO_READINESS, "no Service routes to it; it holds the image, nothing else"),
    ]
)


GATE_SERVICE_ACCOUNT = "warmstart-image-gate"
GATE_LABELS = {"app.kubernetes.io/name": "warmstart-image-gate", "app.kubernetes.io/part-of": "warmstart"}
GATE_ANNOTATIONS = scanner_annotations(
    [
        departure(
            NEEDS_API_TOKEN,
            "it reads the status of the image pre-pull DaemonSets (get, by name, in its own namespace only)",
        ),
        departure(NO_LIVENESS, "a Job bounded by activeDeadlineSeconds; it exits by itself at its own deadline"),
        departure(NO_READINESS, "a Job: no Service routes to it"),
    ]
)
# The Job's own deadline (activeDeadlineSeconds) beyond the gate's: time to schedule the pod, pull the agent image
# and start Python. Past it the Job fails, which also ends the deploy's wait (prepull.py).
GATE_START_SECONDS = 120


class PrepullChart(cdk8s.Chart):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        images: list[str],
        pause_image: str,
        gate_image: str,
        gate_image_revision: str,
        gate_deadline_seconds: int,
    ) -> None:
        super().__init__(scope, id)
        images = sorted(set(images))
        self.daemon_sets = {image: self._daemon_set(image, pause_image) for image in images}
        meta = lambda name: k8s.ObjectMeta(name=name, namespace=AGENT_NAMESPACE, labels=GATE_LABELS)  # noqa: E731
        self.gate_account = k8s.KubeServiceAccount(self, "GateAccount", metadata=meta(GATE_SERVICE_ACCOUNT))
        self.gate_role = k8s.KubeRole(
            self,
            "GateRole",
            metadata=meta(GATE_SERVICE_ACCOUNT),
            rules=[
                k8s.PolicyRule(
                    api_groups=["apps"],
                    resources=["daemonsets"],
                    verbs=["get"],
                    resource_names=[prepull_daemonset_name(image) for image in images],
                )
            ],
        )
        self.gate_binding = k8s.KubeRoleBinding(
            self,
            "GateBinding",
            metadata=meta(GATE_SERVICE_ACCOUNT),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=GATE_SERVICE_ACCOUNT),
            subjects=[k8s.Subject(kind="ServiceAccount", name=GATE_SERVICE_ACCOUNT, namespace=AGENT_NAMESPACE)],
        )
        self.gates: dict[str, k8s.KubeJob] = {}
        self.gate_names: dict[str, str] = {}
        for image in images:
            job = self._gate(image, gate_image, gate_deadline_seconds)
            # A Job's pod template cannot change: the name changes with everything in the rendered Job (the
            # agent image's token replaced by its content hash, which is stable across synths).
            rendered = json.dumps(job.to_json(), sort_keys=True).replace(gate_image, gate_image_revision)
            name = image_gate_name(image, hashlib.sha256(rendered.encode()).hexdigest())
            job.add_json_patch(cdk8s.JsonPatch.replace("/metadata/name", name))
            job.add_dependency(self.gate_binding)
            job.add_dependency(self.gate_account)
            self.gates[image], self.gate_names[image] = job, name

    def _gate(self, image: str, gate_image: str, deadline_seconds: int) -> k8s.KubeJob:
        """A Job per serving image, finished once the image is on the nodes or its deadline passed (and failed at
        the latest at activeDeadlineSeconds); it stays as the record of that rollout (kubectl logs job/<name>)."""
        small = _memory_bound(cpu="50m", memory="128Mi")
        return k8s.KubeJob(
            self,
            prepull_daemonset_name(image).replace("image-cache-", "gate-"),
            metadata=k8s.ObjectMeta(
                name="named-after-its-content",
                namespace=AGENT_NAMESPACE,
                labels=GATE_LABELS,
                annotations={"warmstart.io/image": image, **GATE_ANNOTATIONS},
            ),
            spec=k8s.JobSpec(
                backoff_limit=3,
                active_deadline_seconds=deadline_seconds + GATE_START_SECONDS,
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=GATE_LABELS),
                    spec=isolated_pod_spec(
                        restart_policy="OnFailure",
                        service_account_name=GATE_SERVICE_ACCOUNT,
                        security_context=pod_security(selinux_level=None),
                        containers=[
                            k8s.Container(
                                name="gate",
                                image=gate_image,
                                image_pull_policy="IfNotPresent",
                                command=["python", "-m", "image_preload.runtime.gate"],
                                args=[
                                    f"--namespace={AGENT_NAMESPACE}",
                                    f"--daemon-set={prepull_daemonset_name(image)}",
                                    f"--deadline-seconds={deadline_seconds}",
                                ],
                                resources=small,
                                security_context=locked_down(read_only_root=True),
                            )
                        ],
                    ),
                ),
            ),
        )

    def _daemon_set(self, image: str, pause_image: str) -> k8s.KubeDaemonSet:
        name = prepull_daemonset_name(image)
        labels = {
            "app.kubernetes.io/name": "warmstart-image-cache",
            "app.kubernetes.io/part-of": "warmstart",
            PREPULL_LABEL: name,
        }
        tiny = _memory_bound(cpu="1m", memory="16Mi")
        return k8s.KubeDaemonSet(
            self,
            name,
            metadata=k8s.ObjectMeta(
                name=name,
                namespace=AGENT_NAMESPACE,
                labels=labels,
                annotations={"warmstart.io/image": image, **ANNOTATIONS},
            ),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=labels),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels),
                    spec=isolated_pod_spec(
                        node_selector=gpu_pool_selector(),
                        tolerations=pool_k8s_tolerations(),
                        termination_grace_period_seconds=1,
                        automount_service_account_token=False,
                        security_context=pod_security(selinux_level=None),
                        init_containers=[
                            k8s.Container(
                                name="pull",
                                image=image,
                                image_pull_policy="IfNotPresent",
                                command=["/bin/sh", "-c", "exit 0"],
                                resources=tiny,
                                security_context=locked_down(read_only_root=True),
                            )
                        ],
                        containers=[
                            k8s.Container(
                                name="hold",
                                image=pause_image,
                                image_pull_policy="IfNotPresent",
                                resources=tiny,
                                security_context=locked_down(read_only_root=True, run_as_user=PAUSE_USER),
                            )
                        ],
                    ),
                ),
            ),
        )


def _memory_bound(*, cpu: str, memory: str) -> k8s.ResourceRequirements:
    """Requests, and a memory limit equal to the request (no CPU limit: see hardening.CPU_REQUEST_ONLY)."""
    return k8s.ResourceRequirements(
        requests={"cpu": k8s.Quantity.from_string(cpu), "memory": k8s.Quantity.from_string(memory)},
        limits={"memory": k8s.Quantity.from_string(memory)},
    )
