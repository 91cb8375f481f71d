"""The agent's ValidatingAdmissionPolicy, as synthesized, evaluated by a real CEL evaluator
(common-expression-language) on allowed and forbidden node updates, the way the API server evaluates it:
match conditions, then variables in order, then every validation (Kubernetes docs, "Validating Admission
Policy"). No optional types are used, so the expressions are also valid on the oldest supported version."""

from __future__ import annotations

import copy
from typing import Any

import cel
import pytest

from tests.manifests import of_kind

AGENT = "system:serviceaccount:warmstart-system:warmstart-agent"
NODE = {
    "metadata": {
        "name": "node-a",
        "labels": {"kubernetes.io/arch": "amd64", "karpenter.sh/nodepool": "gpu", "weights.warmstart.io/qwen": "ready"},
        "annotations": {"karpenter.sh/nodepool-hash": "123"},
        "finalizers": ["karpenter.sh/termination"],
        "ownerReferences": [{"kind": "NodeClaim", "name": "gpu-abc"}],
    },
    "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "providerID": "aws:///i-1"},
}


def _policy(synthesized, name: str) -> dict:
    (policy,) = [
        p for p in of_kind(synthesized.manifests(), "ValidatingAdmissionPolicy") if p["metadata"]["name"] == name
    ]
    return policy["spec"]


@pytest.fixture(scope="module")
def policy(dev):
    return _policy(dev, "warmstart-agent-own-node-only")


@pytest.fixture(scope="module")
def starts_policy(dev):
    return _policy(dev, "warmstart-agent-own-starts-only")


def admitted(
    policy: dict,
    new: dict | None,
    *,
    user: str = AGENT,
    node_claim: str | None = "node-a",
    old: dict | None = NODE,
    request: dict | None = None,
) -> bool:
    extra = {"authentication.kubernetes.io/node-name": [node_claim]} if node_claim else {}
    context: dict[str, Any] = {
        "object": new,
        "oldObject": old,
        "request": {"userInfo": {"username": user, "extra": extra}, **(request or {})},
    }
    if not all(cel.evaluate(c["expression"], context) for c in policy["matchConditions"]):
        return True  # not the agent: the policy does not apply
    context["variables"] = {}
    for variable in policy.get("variables", []):
        context["variables"][variable["name"]] = cel.evaluate(variable["expression"], context)
    return all(cel.evaluate(v["expression"], context) for v in policy["validations"])


def changed(change) -> dict:
    node = copy.deepcopy(NODE)
    change(node)
    return node


ALLOWED = {
    "a compile-cache label": lambda n: n["metadata"]["labels"].update({"compile-cache.warmstart.io/qwen": "restored"}),
    "a hit/miss label": lambda n: n["metadata"]["labels"].update({"compile-use.warmstart.io/qwen": "hit"}),
    "a weights label removed": lambda n: n["metadata"]["labels"].pop("weights.warmstart.io/qwen"),
}
FORBIDDEN = {
    "another label changed": lambda n: n["metadata"]["labels"].update({"kubernetes.io/arch": "arm64"}),
    "another label removed": lambda n: n["metadata"]["labels"].pop("karpenter.sh/nodepool"),
    "a look-alike domain": lambda n: n["metadata"]["labels"].update({"evilwarmstart.io/x": "1"}),
    "a sub-domain of ours": lambda n: n["metadata"]["labels"].update({"x.weights.warmstart.io/y": "1"}),
    "an annotation added": lambda n: n["metadata"]["annotations"].update({"note": "x"}),
    "the annotations removed": lambda n: n["metadata"].pop("annotations"),
    "a finalizer removed": lambda n: n["metadata"].update({"finalizers": []}),
    "the owner changed": lambda n: n["metadata"].update({"ownerReferences": [{"kind": "Other", "name": "x"}]}),
    "a taint removed": lambda n: n["spec"].update({"taints": []}),
}


@pytest.mark.parametrize("case", ALLOWED)
def test_the_agent_may_change_its_own_labels_on_its_own_node(policy, case):
    assert admitted(policy, changed(ALLOWED[case]))


@pytest.mark.parametrize("case", FORBIDDEN)
def test_the_agent_may_change_nothing_else(policy, case):
    assert not admitted(policy, changed(FORBIDDEN[case]))


def test_only_its_own_node_and_only_with_a_node_bound_token(policy):
    label = ALLOWED["a compile-cache label"]
    assert not admitted(policy, changed(label), node_claim="node-b")
    assert not admitted(policy, changed(label), node_claim=None)  # a token without the node-name claim


def test_other_users_are_not_this_policys_business(policy):
    assert admitted(policy, changed(FORBIDDEN["a taint removed"]), user="system:node:node-a")


def _config_map(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "warmstart-system"}, "data": {"starts.json": "[]"}}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_agent_may_write_its_own_nodes_starts_only(starts_policy, operation):
    def write(name: str, *, namespace: str = "warmstart-system", **kwargs) -> bool:
        request = {"operation": operation, "namespace": namespace}
        return admitted(starts_policy, _config_map(name), old=None, request=request, **kwargs)

    assert write("starts-node-a")
    assert not write("starts-node-b")  # another node's record
    assert not write("warmstart-agent-settings")  # the settings every agent reads
    assert not write("starts-node-a", namespace="default")
    assert not write("starts-node-a", node_claim=None)  # a token not bound to a node
    assert write("warmstart-agent-settings", user="system:serviceaccount:kube-system:deployer")  # others: RBAC's


def test_the_agent_may_delete_no_configmap(starts_policy):
    request = {"operation": "DELETE", "namespace": "warmstart-system"}
    assert not admitted(starts_policy, None, old=_config_map("starts-node-a"), request=request)
