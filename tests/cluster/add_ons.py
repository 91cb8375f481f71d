"""The add-ons' DaemonSets on a GPU node, as the node model counts them (warmstart/node_model.py ADD_ON_PODS): each
with its requests, its tolerations and the node affinity of its published manifest. The VPC CNI, kube-proxy and the
Pod Identity agent tolerate every taint and keep off Auto Mode nodes (`eks.amazonaws.com/compute-type NotIn auto`);
the NVIDIA device plugin runs with warmstart's placement (kube/gpu_nodes.py device_plugin_placement)."""

from __future__ import annotations

from kube.gpu_nodes import device_plugin_placement
from warmstart.node_model import ADD_ON_PODS, DaemonSetPod

DEVICE_PLUGIN = "kube-system/nvidia-device-plugin"
EVERY_TAINT = [{"operator": "Exists"}]
NOT_ON_AUTO_MODE = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate", "auto"]}
                    ]
                }
            ]
        }
    }
}


def add_on_daemonset(pod: DaemonSetPod) -> dict:
    namespace, name = pod.name.split("/")
    labels = {"app.kubernetes.io/name": name}
    placement = (
        device_plugin_placement()
        if pod.name == DEVICE_PLUGIN
        else {"tolerations": EVERY_TAINT, "affinity": NOT_ON_AUTO_MODE}
    )
    requests = {"cpu": f"{pod.requests.cpu_millis}m", "memory": f"{pod.requests.memory_mib}Mi"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}
                    ],
                    **placement,
                },
            },
        },
    }


def add_on_daemonsets() -> list[dict]:
    return [add_on_daemonset(pod) for pod in ADD_ON_PODS]
