"""The Kubernetes API part of the agent, through a fake transport that records request shapes."""

import pytest

from node_agent.runtime.kube import KubeApi, KubeError, host_paths, is_ready
from tests.agent.fake_kube import FakeCluster, vllm_pod


def test_node_is_read_by_name():
    cluster = FakeCluster()
    cluster.add_node("ip-10-0-1-2.ec2.internal", "p5.48xlarge")
    node = KubeApi(cluster).node("ip-10-0-1-2.ec2.internal")
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    (request,) = cluster.requests
    assert (request.method, request.path, request.body) == ("GET", "/api/v1/nodes/ip-10-0-1-2.ec2.internal", None)


def test_labels_are_a_merge_patch_of_labels_only():
    cluster = FakeCluster()
    cluster.add_node("n1", "g6e.xlarge")
    KubeApi(cluster).label_node("n1", {"compile-cache.warmstart.io/qwen3-4b": "restored", "old": None})
    (request,) = cluster.requests
    assert request.method == "PATCH" and request.path == "/api/v1/nodes/n1"
    assert request.content_type == "application/merge-patch+json"
    assert request.body == {"metadata": {"labels": {"compile-cache.warmstart.io/qwen3-4b": "restored", "old": None}}}
    assert cluster.nodes["n1"]["metadata"]["labels"]["compile-cache.warmstart.io/qwen3-4b"] == "restored"


def test_pods_are_listed_for_this_node_only():
    cluster = FakeCluster()
    cluster.pods = [
        vllm_pod(name="a", node="n1", model="m", host_path="/x/m/f", ready=True),
        vllm_pod(name="b", node="n2", model="m", host_path="/x/m/f", ready=True),
    ]
    pods = KubeApi(cluster).pods_on_node("n1", "app.kubernetes.io/name=vllm")
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    (request,) = cluster.requests
    assert request.path == "/api/v1/pods"
    assert request.query == {"fieldSelector": "spec.nodeName=n1", "labelSelector": "app.kubernetes.io/name=vllm"}


def test_api_errors_raise_with_the_status():
    cluster = FakeCluster(fail_with=403)
    with pytest.raises(KubeError, match="403"):
        KubeApi(cluster).node("n1")


def test_readiness_and_host_paths():
    pod = vllm_pod(name="a", node="n1", model="m", host_path="/mnt/k8s-disks/0/compile-cache/m/f", ready=True)
    assert is_ready(pod)
    assert host_paths(pod) == ["/mnt/k8s-disks/0/compile-cache/m/f"]
    pod["status"]["conditions"][0]["status"] = "False"
    assert not is_ready(pod)
