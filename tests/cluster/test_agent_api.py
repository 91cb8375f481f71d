"""The agent against the real API server: its RBAC, its admission policies, and the fake it is tested against.

The agent's objects of the prod environment (namespace, service account, roles, bindings, the admission policies
that keep it to its own node and its own starts ConfigMap) are applied to a real kube-apiserver; each node's agent
calls with a real token bound to an agent pod on that node (the node-name claim the policies read).

- Every agent test that uses the fake API (tests/agent: test_kube, test_node_agent, test_starts,
  test_cache_hits_on_nodes) runs here too, with `MirroredCluster` in place of the fake: each call goes to the fake
  and to the server, and the answers must agree in every field the agent reads (tests/cluster/mirror.py).
- The denials the admission policies promise, for a real pod-bound token.
- Each grant of the agent's ClusterRole and Role is used by a call the agent makes, and nothing more is granted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

import tests.agent.cluster_world as cluster_world
import tests.agent.test_kube as kube_tests
import tests.agent.test_node_agent as node_agent_tests
import tests.agent.test_starts as starts_tests
from contracts.agent_settings import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT
from contracts.start_record import starts_config_map_name
from node_agent.host_path_policy import POLICY_NAME
from node_agent.runtime.kube import KubeApi, KubeError
from tests.agent.conftest import clock, log, small_disk, store  # noqa: F401  # fixtures of the imported tests
from tests.agent.test_cache_hits_on_nodes import *  # noqa: F403  # the same tests, against the mirror
from tests.agent.test_kube import *  # noqa: F403
from tests.agent.test_node_agent import *  # noqa: F403
from tests.agent.test_starts import *  # noqa: F403
from tests.agent.test_starts import world  # noqa: F401  # its fixture
from tests.cluster.api import Api, in_order
from tests.cluster.mirror import MirroredCluster, RealSide

pytestmark = pytest.mark.control_plane

AGENT_LABEL = ("app.kubernetes.io/name", "warmstart-agent")
SWAPPED = (cluster_world, kube_tests, node_agent_tests, starts_tests)  # the modules that name FakeCluster


def agent_objects(synthesized) -> list[dict]:
    """The agent's objects and its namespace, as the prod stack applies them; not the host-path policy, which holds
    pods to the rendered node paths (the mirrored tests' pods use the stand-in nodes' folders; test_pod_security
    runs that policy on the rendered pods)."""
    return [
        o
        for o in synthesized.manifests()
        if (
            (o["metadata"].get("labels") or {}).get(AGENT_LABEL[0]) == AGENT_LABEL[1]
            and o["metadata"]["name"] != POLICY_NAME
        )
        or (o["kind"] == "Namespace" and o["metadata"]["name"] == AGENT_NAMESPACE)
    ]


@pytest.fixture(scope="module")
def real_side(prod, control_plane_built, tmp_path_factory) -> Iterator[RealSide]:
    from tests.cluster.control_plane import ControlPlane

    plane = ControlPlane(tmp_path_factory.mktemp("plane")).start()
    try:
        admin = Api(plane)
        objects = agent_objects(prod)
        for obj in in_order([o for o in objects if o["kind"] != "DaemonSet"]):
            answer = admin.apply(obj)
            assert answer.ok and not answer.warnings, f"{obj['kind']} {obj['metadata']['name']}: {answer.message}"
        (daemon_set,) = [o for o in objects if o["kind"] == "DaemonSet"]
        side = RealSide(plane, admin, daemon_set["spec"]["template"], tmp_path_factory.mktemp("accounts"))
        _wait_for_the_policies(side)
        yield side
    finally:
        plane.stop()


def _wait_for_the_policies(side: RealSide) -> None:
    """A new admission policy takes effect once the server has loaded it (a second or two): until an agent's
    write to another node is denied (a dry run), nothing is tested."""
    _agent_on(side, "policy-probe-a")
    _agent_on(side, "policy-probe-b")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _ = side.transport("policy-probe-a").request(
            "PATCH",
            "/api/v1/nodes/policy-probe-b?dryRun=All",
            body={"metadata": {"labels": {"compile-cache.warmstart.io/probe": "x"}}},
            content_type="application/merge-patch+json",
        )
        if status in (403, 422):
            return
        time.sleep(0.3)
    raise TimeoutError("the agent's admission policies never took effect")


@pytest.fixture(autouse=True)
def mirrored(real_side, monkeypatch) -> Iterator[list[MirroredCluster]]:
    """Every FakeCluster the agent tests make is a MirroredCluster for this test; none may disagree."""
    real_side.reset()
    made: list[MirroredCluster] = []

    class Mirror(MirroredCluster):
        real = real_side

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    for module in SWAPPED:
        monkeypatch.setattr(module, "FakeCluster", Mirror)
    yield made
    disagreements = [m for cluster in made for m in cluster.mismatches]
    # A mirror the agent spoke through must have compared calls (only fail_with answers are not compared).
    silent = [c for c in made if c.requests_seen and not c.compared and not c.skipped]
    assert not silent, f"{len(silent)} mirrored cluster(s) answered calls and compared none"
    assert not disagreements, "the fake answered otherwise than the API server:\n" + "\n".join(disagreements)


# ---- what the admission policies promise, for a real pod-bound token ----


def _agent_on(real_side: RealSide, node: str) -> KubeApi:
    admin = real_side.admin
    if not admin.request("GET", f"/api/v1/nodes/{node}").ok:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"team": "a"}}}
        assert admin.request("POST", "/api/v1/nodes", body).ok
    return KubeApi(real_side.transport(node))


def test_the_agent_labels_its_own_node_with_its_own_labels_only(real_side):
    agent = _agent_on(real_side, "label-a")
    _agent_on(real_side, "label-b")
    labelled = agent.label_node("label-a", {"compile-cache.warmstart.io/qwen3-4b": "restored"})
    assert labelled["metadata"]["labels"]["compile-cache.warmstart.io/qwen3-4b"] == "restored"
    refusals = {
        "another node": lambda: agent.label_node("label-b", {"compile-cache.warmstart.io/qwen3-4b": "restored"}),
        "a label outside its domains": lambda: agent.label_node("label-a", {"team": "b"}),
        "a label that only contains a domain": lambda: agent.label_node(
            "label-a", {"evil.compile-cache.warmstart.io.example/x": "1"}
        ),
        "another label removed": lambda: agent.label_node("label-a", {"team": None}),
    }
    for case, call in refusals.items():
        with pytest.raises(KubeError) as refused:
            call()
        assert refused.value.status in (403, 422), case
    node = real_side.admin.get("/api/v1/nodes/label-a")
    assert node["metadata"]["labels"]["team"] == "a"


def test_the_agent_writes_its_own_starts_config_map_only(real_side):
    agent = _agent_on(real_side, "starts-a")
    _agent_on(real_side, "starts-b")

    def body(name: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
            "data": {"starts.json": "[]"},
        }

    agent.apply_config_map(AGENT_NAMESPACE, body(starts_config_map_name("starts-a")))
    assert agent.config_map(AGENT_NAMESPACE, starts_config_map_name("starts-a"))["data"] == {"starts.json": "[]"}
    for name in (starts_config_map_name("starts-b"), "warmstart-agent-settings", "anything-else"):
        with pytest.raises(KubeError) as refused:
            agent.apply_config_map(AGENT_NAMESPACE, body(name))
        assert refused.value.status in (403, 422), name
    with pytest.raises(KubeError) as elsewhere:
        agent.apply_config_map(
            "default",
            {
                **body(starts_config_map_name("starts-a")),
                "metadata": {"name": starts_config_map_name("starts-a"), "namespace": "default"},
            },
        )
    assert elsewhere.value.status == 403


def test_every_grant_is_used_and_nothing_more_is_granted(real_side):
    """What the server says the agent's token may do (SelfSubjectRulesReview), against the calls it makes."""
    _agent_on(real_side, "node-a")
    answers = {}
    for namespace in (AGENT_NAMESPACE, "default"):
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": namespace},
        }
        transport = real_side.transport("node-a")
        status, answer = transport.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body=review)
        assert status == 201, answer
        answers[namespace] = {
            (resource, verb)
            for rule in answer["status"]["resourceRules"]
            if "" in rule.get("apiGroups", [])
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    # Every grant of the agent's own roles, with the call that uses it (node_agent/runtime/kube.py).
    used = {
        ("nodes", "get"): "KubeApi.node",
        ("nodes", "patch"): "KubeApi.label_node",
        ("pods", "list"): "KubeApi.pods_on_node",
        ("events", "list"): "KubeApi.pod_events",
        ("configmaps", "get"): "KubeApi.config_map",
        ("configmaps", "create"): "KubeApi.apply_config_map (server-side apply of a new ConfigMap)",
        ("configmaps", "patch"): "KubeApi.apply_config_map",
    }
    assert answers[AGENT_NAMESPACE] == set(used), json.dumps(sorted(answers[AGENT_NAMESPACE]))
    assert answers["default"] == set(used) - {("configmaps", "get"), ("configmaps", "create"), ("configmaps", "patch")}


def test_the_mirror_compared_every_call_of_a_full_agent_round(real_side, mirrored, tmp_path, s3_server):
    """The mirror itself: a world's agent round goes through it, and each call was compared."""
    made = cluster_world.make_world(s3_server, tmp_path)
    node = made.node("node-a")
    node.agent.start()
    node.agent.tick()
    (cluster,) = mirrored
    assert cluster.compared >= 3 and not cluster.mismatches
    assert (
        real_side.admin.get("/api/v1/nodes/node-a")["metadata"]["labels"]
        == made.cluster.nodes["node-a"]["metadata"]["labels"]
    )


def test_the_service_account_is_the_daemon_sets(real_side):
    identity = real_side.identity("node-a")
    pod = real_side.admin.get(f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{identity.pod}")
    assert pod["spec"]["serviceAccountName"] == AGENT_SERVICE_ACCOUNT
