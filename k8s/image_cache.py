"""Container image pre-pull: one DaemonSet per distinct serving image on the GPU pool.

Its init container runs the serving image and exits at once, so the kubelet pulls the image onto every GPU
node as the node joins; a tiny pause container then keeps the pod (and so the image) in place. It never
blocks a Deployment: a vLLM pod that starts first simply pulls as usual. Deployments that share an image
share its DaemonSet; it goes when no model uses the image.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s.gpu_nodes import GPU_NODE_POOL, GPU_TAINT
from k8s.hardening import NO_LIVENESS, NO_READINESS, departure, locked_down, pod_security, scanner_annotations
from warmstart.agent_settings import AGENT_NAMESPACE
from warmstart.workload import image_cache_name

IMAGE_CACHE_LABEL = "warmstart.io/image-cache"
PAUSE_USER = 65535  # the pause image's own non-root user
ANNOTATIONS = scanner_annotations([
    departure(NO_LIVENESS, "its only container is the pause process: nothing to probe; it holds the image"),
    departure(NO_READINESS, "no Service routes to it; it holds the image, nothing else"),
])


class ImageCacheChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, images: list[str], pause_image: str) -> None:
        super().__init__(scope, id)
        self.daemon_sets = {image: self._daemon_set(image, pause_image) for image in sorted(set(images))}

    def _daemon_set(self, image: str, pause_image: str) -> k8s.KubeDaemonSet:
        name = image_cache_name(image)
        labels = {"app.kubernetes.io/name": "warmstart-image-cache", "app.kubernetes.io/part-of": "warmstart",
                  IMAGE_CACHE_LABEL: name}
        tiny = k8s.ResourceRequirements(
            requests={"cpu": k8s.Quantity.from_string("1m"), "memory": k8s.Quantity.from_string("16Mi")},
            limits={"memory": k8s.Quantity.from_string("16Mi")},
        )
        return k8s.KubeDaemonSet(
            self,
            name,
            metadata=k8s.ObjectMeta(name=name, namespace=AGENT_NAMESPACE, labels=labels,
                                    annotations={"warmstart.io/image": image, **ANNOTATIONS}),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=labels),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels),
                    spec=k8s.PodSpec(
                        node_selector={"karpenter.sh/nodepool": GPU_NODE_POOL},
                        tolerations=[k8s.Toleration(key=GPU_TAINT["key"], operator="Exists", effect=GPU_TAINT["effect"])],
                        termination_grace_period_seconds=1,
                        automount_service_account_token=False,
                        security_context=pod_security(selinux_level=None),
                        init_containers=[
                            k8s.Container(name="pull", image=image, image_pull_policy="IfNotPresent",
                                          command=["/bin/sh", "-c", "exit 0"], resources=tiny,
                                          security_context=locked_down(read_only_root=True))
                        ],
                        containers=[
                            k8s.Container(name="hold", image=pause_image, image_pull_policy="IfNotPresent",
                                          resources=tiny,
                                          security_context=locked_down(read_only_root=True, run_as_user=PAUSE_USER))
                        ],
                    ),
                ),
            ),
        )
