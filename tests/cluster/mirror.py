"""The fake API (tests/agent/fake_kube.py) checked against the real API server, call by call.

`MirroredCluster` is a FakeCluster that, for every request the agent makes, first brings the real server to the
fake's state (nodes and their labels, pods with their status, events, ConfigMaps), then sends the same request to
both: the fake's answer goes back to the agent (the tests' assertions stay the fake's), and the real server's answer,
made with a real pod-bound service-account token of the agent pod on the node the call is about (its node-name
claim), must agree with it: same success or failure, and the same content in every field the agent reads. A
disagreement is recorded, and the tier fails the test on any.

Which node's agent calls is read from the request (the node in the path or the field selector, the pod whose events
are listed, the node in the starts ConfigMap's name): tests build `KubeApi(cluster)` without saying which node. So
the identity is the target's node's agent: a call one node's agent makes about another node is compared as that
node's agent would make it (the admission tests in test_agent_api.py cover cross-node calls with a fixed identity).
"""

from __future__ import annotations

import copy
import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from contracts.agent_settings import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT
from contracts.pod_labels import model_labels
from contracts.start_record import STARTS_LABEL, starts_config_map_name
from node_agent.runtime.kube import InClusterTransport, is_ready
from tests.agent.fake_kube import FakeCluster
from tests.cluster.api import Api
from tests.cluster.control_plane import ControlPlane


@dataclass
class AgentIdentity:
    """What the agent pod on one node holds: its token, mounted where InClusterTransport reads it."""

    pod: str
    account_dir: Path


@dataclass
class RealSide:
    """The real server, its admin client, and what the mirror has put there."""

    plane: ControlPlane
    admin: Api
    agent_pod_template: dict
    scratch: Path
    identities: dict[str, AgentIdentity] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)  # (namespace, name) -> the fake's pod pushed
    namespaces: set[str] = field(default_factory=set)

    def reset(self) -> None:
        """Between tests: no model pods, events or starts ConfigMaps left; node labels are replaced at first use."""
        for namespace in sorted(self.namespaces):
            self.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
        for namespace in sorted(self.namespaces | {AGENT_NAMESPACE}):
            self.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/events")
        selector = urllib.parse.urlencode({"labelSelector": "=".join(STARTS_LABEL)})
        self.admin.request("DELETE", f"/api/v1/namespaces/{AGENT_NAMESPACE}/configmaps?{selector}")
        self.pods.clear()

    def identity(self, node: str) -> AgentIdentity:
        """The agent pod on `node` (the DaemonSet's template, bound to the node) and a token bound to it."""
        if node not in self.identities:
            template = copy.deepcopy(self.agent_pod_template)
            name = f"warmstart-agent-{len(self.identities)}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**template["metadata"], "name": name, "namespace": AGENT_NAMESPACE},
                "spec": {**template["spec"], "nodeName": node},
            }
            created = self.admin.request("POST", f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods", pod)
            assert created.ok, f"agent pod on {node}: {created.message}"
            token = self.admin.request(
                "POST",
                f"/api/v1/namespaces/{AGENT_NAMESPACE}/serviceaccounts/{AGENT_SERVICE_ACCOUNT}/token",
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {
                        "expirationSeconds": 3600,
                        "boundObjectRef": {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": name,
                            "uid": created.body["metadata"]["uid"],
                        },
                    },
                },
            )
            assert token.ok, f"token for {name}: {token.message}"
            folder = self.scratch / f"account-{name}"
            folder.mkdir(parents=True)
            (folder / "token").write_text(token.body["status"]["token"])
            (folder / "ca.crt").write_bytes(self.plane.ca.read_bytes())
            self.identities[node] = AgentIdentity(name, folder)
        return self.identities[node]

    def transport(self, node: str) -> InClusterTransport:
        """The agent's own transport, as in its pod (the token file re-read at every call)."""
        return InClusterTransport("127.0.0.1", str(self.plane.port), account_dir=self.identity(node).account_dir)


def _labels(obj: dict) -> dict:
    return dict(obj.get("metadata", {}).get("labels") or {})


class MirroredCluster(FakeCluster):
    """A FakeCluster whose every answer is checked against the real server (see the module's docstring)."""

    real: RealSide | None = None  # set by the tier's fixture for the test that runs

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)  # FakeCluster's dataclass __init__ (it calls no __post_init__)
        self.mismatches: list[str] = []
        self.compared = 0
        self.skipped = 0
        self.requests_seen = 0  # calls answered while no failure was injected (each must be compared or skipped)
        self._ever: set[str] = set(self.nodes)  # every node the fake has had in this test
        self._pushed_labels: dict[str, dict] = {}

    # ---- the fake's state, pushed to the real server ----

    def _sync(self) -> None:
        real = self.real
        assert real is not None
        admin = real.admin
        self._ever |= set(self.nodes)
        for name, node in self.nodes.items():
            labels = _labels(node)
            if self._pushed_labels.get(name) == labels:
                continue
            answer = admin.request("GET", f"/api/v1/nodes/{name}")
            if answer.status == 404:
                created = admin.request(
                    "POST",
                    "/api/v1/nodes",
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
                )
                assert created.ok, created.message
            else:
                current = _labels(answer.body)
                patch = {**{k: None for k in current if k not in labels}, **labels}
                admin.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": patch}})
            self._pushed_labels[name] = labels
        wanted = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in self.pods}
        for key in [k for k in real.pods if k not in wanted]:
            admin.request("DELETE", f"/api/v1/namespaces/{key[0]}/pods/{key[1]}?gracePeriodSeconds=0")
            del real.pods[key]
        for key, pod in wanted.items():
            if real.pods.get(key) == pod:
                continue
            self._push_pod(pod, created=key in real.pods)
            real.pods[key] = copy.deepcopy(pod)
        for event in self.events:
            self._push_event(event)
        for (namespace, name), config_map in self.config_maps.items():
            self._push_config_map(namespace, name, config_map)

    def _push_pod(self, pod: dict, *, created: bool) -> None:
        real = self.real
        assert real is not None
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if namespace not in real.namespaces:
            body = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": model_labels(namespace)},
            }
            answer = real.admin.request("POST", "/api/v1/namespaces", body)
            assert answer.ok or answer.status == 409, answer.message
            # The controller manager would make it; this server runs none, and admission looks the pod's up.
            account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            real.admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
            real.namespaces.add(namespace)
        if not created:
            volumes = [v for v in pod["spec"].get("volumes", []) if "hostPath" in v]
            mounts = [{"name": v["name"], "mountPath": f"/m/{v['name']}"} for v in volumes]
            # The containers by the names the pod has (its status names them), each a plain container.
            containers = [c["name"] for c in pod["spec"].get("containers", [])] or ["vllm"]
            spec: dict = {
                "nodeName": pod["spec"]["nodeName"],
                "containers": [
                    {"name": c, "image": "vllm/vllm-openai:v0.21.0", "volumeMounts": mounts} for c in containers
                ],
                "volumes": volumes,
            }
            if pod["spec"].get("initContainers"):
                spec["initContainers"] = [
                    {"name": c["name"], "image": "busybox"} for c in pod["spec"]["initContainers"]
                ]
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": _labels(pod)},
                "spec": spec,
            }
            answer = real.admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            assert answer.ok, f"pod {namespace}/{name}: {answer.message}"
        else:  # a test that relabels a pod (labels name its model): the server's copy follows
            current = _labels(real.admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}").body)
            if current != _labels(pod):
                patch = {**{k: None for k in current if k not in _labels(pod)}, **_labels(pod)}
                answer = real.admin.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{name}",
                    {"metadata": {"labels": patch}},
                    content_type="application/merge-patch+json",
                )
                assert answer.ok, f"pod labels {namespace}/{name}: {answer.message}"
        status = copy.deepcopy(pod.get("status", {}))
        answer = real.admin.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        assert answer.ok, f"pod status {namespace}/{name}: {answer.message}"
        if pod["metadata"].get("deletionTimestamp"):
            # A pod being deleted: a graceful delete of a bound pod sets the server's deletionTimestamp, and with no
            # kubelet to confirm it, the pod stays there terminating, as the fake's does.
            answer = real.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=30")
            assert answer.ok, f"pod delete {namespace}/{name}: {answer.message}"

    def _push_event(self, event: dict) -> None:
        real = self.real
        assert real is not None
        namespace = event["metadata"]["namespace"]
        name = event["metadata"]["name"]
        if real.admin.request("GET", f"/api/v1/namespaces/{namespace}/events/{name}").ok:
            return
        if namespace not in real.namespaces and namespace != AGENT_NAMESPACE:
            real.admin.request(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            real.namespaces.add(namespace)
        body = {k: v for k, v in copy.deepcopy(event).items() if k not in ("status",)}
        body["metadata"] = {"name": name, "namespace": namespace}
        body.update(apiVersion="v1", kind="Event")
        answer = real.admin.request("POST", f"/api/v1/namespaces/{namespace}/events", body)
        assert answer.ok, f"event {name}: {answer.message}"

    def _push_config_map(self, namespace: str, name: str, config_map: dict) -> None:
        real = self.real
        assert real is not None
        answer = real.admin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        if answer.ok and answer.body.get("data") == config_map.get("data"):
            return
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                k: v
                for k, v in config_map.get("metadata", {}).items()
                if k in ("name", "namespace", "labels", "ownerReferences")
            },
            "data": config_map.get("data", {}),
        }
        body["metadata"].update(name=name, namespace=namespace)
        query = urllib.parse.urlencode({"fieldManager": "warmstart-test-seed", "force": "true"})
        seeded = real.admin.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/{name}?{query}",
            body,
            content_type="application/apply-patch+yaml",
        )
        assert seeded.ok, f"config map {name}: {seeded.message}"

    # ---- each request, to both ----

    def _caller(self, path: str, query: dict) -> str | None:
        """The node whose agent makes this call."""
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            return parts[3]
        if "fieldSelector" in query and query["fieldSelector"].startswith("spec.nodeName="):
            return query["fieldSelector"].removeprefix("spec.nodeName=")
        if "fieldSelector" in query and query["fieldSelector"].startswith("involvedObject.uid="):
            uid = query["fieldSelector"].removeprefix("involvedObject.uid=")
            for pod in self.pods:
                if pod["metadata"].get("uid") == uid:
                    return pod["spec"]["nodeName"]
            for event in self.events:
                if event["involvedObject"].get("uid") == uid:
                    return (
                        event.get("source", {}).get("host")
                        or next(iter(self.nodes), None)
                        or next(iter(sorted(self._ever)), None)
                    )
        if "configmaps" in parts:
            for node in self.nodes:
                if parts[-1] == starts_config_map_name(node):
                    return node
        for pod in self.pods:
            return pod["spec"]["nodeName"]
        return next(iter(self.nodes), None) or next(iter(sorted(self._ever)), None)

    def request(self, method, path, *, body=None, content_type=None):
        if self.fail_with or self.real is None:
            return super().request(method, path, body=body, content_type=content_type)
        self.requests_seen += 1
        parsed = urllib.parse.urlparse(path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        self._sync()  # the real server in the fake's state before the call (a write then changes both)
        fake_status, fake_body = super().request(method, path, body=copy.deepcopy(body), content_type=content_type)
        node = self._caller(parsed.path, query)
        if node is None:
            self.mismatches.append(f"{method} {path}: no node to call as")
            return fake_status, fake_body
        if node not in self.nodes and node in self._ever:
            # A test removed the agent's own node under it: on a real cluster the agent's token dies with the node
            # (its node claim), so there is no answer of the server's to compare with.
            self.skipped += 1
            return fake_status, fake_body
        if node not in self.nodes:  # a test that never added the agent's own node: the server still has one
            self.real.admin.request(
                "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
            )
        real_status, real_body = self.real.transport(node).request(
            method, path, body=copy.deepcopy(body), content_type=content_type
        )
        self.compared += 1
        self._compare(method, parsed.path, fake_status, fake_body, real_status, real_body)
        if method != "GET" and 200 <= real_status < 300:
            self._after_write(parsed.path)
        return fake_status, fake_body

    def _after_write(self, path: str) -> None:
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"]:
            self._pushed_labels[parts[3]] = _labels(self.nodes[parts[3]])

    def _compare(self, method: str, path: str, fake_status: int, fake: dict, real_status: int, real: dict) -> None:
        where = f"{method} {path}"
        if (200 <= fake_status < 300) != (200 <= real_status < 300) or (fake_status == 404) != (real_status == 404):
            self.mismatches.append(
                f"{where}: the fake answered {fake_status}, the server {real_status} ({real.get('message', '')})"
            )
            return
        if not 200 <= fake_status < 300:
            return
        # As JSON (the fake keeps what the agent sent, enums included; the server answers strings).
        ours = json.loads(json.dumps(_what_the_agent_reads(path, fake)))
        theirs = json.loads(json.dumps(_what_the_agent_reads(path, real)))
        if ours != theirs:
            self.mismatches.append(f"{where}: the fake answered {ours}, the server {theirs}")


def _what_the_agent_reads(path: str, body: dict) -> object:
    """The fields of an answer the agent reads (node_agent/runtime/agent.py, start_tracker.py), per kind of call."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "nodes"]:
        meta = body.get("metadata", {})
        return {"labels": meta.get("labels") or {}, "has uid": bool(meta.get("uid")), "name": meta.get("name")}
    if parts == ["api", "v1", "pods"]:
        return sorted(
            (
                p["metadata"]["namespace"],
                p["metadata"]["name"],
                p["spec"].get("nodeName"),
                is_ready(p),
                p.get("status", {}).get("phase"),
                bool(p["metadata"].get("deletionTimestamp")),
                sorted(_labels(p).items()),
                sorted(v["hostPath"]["path"] for v in p["spec"].get("volumes", []) if "hostPath" in v),
                bool(p["metadata"].get("uid")),
            )
            for p in body.get("items", [])
            # The real side's own agent pods carry the tokens the tests speak with; the fake has none. A node's
            # full pod list (the agent's lookup of a record's pod) lists them there, and the agent decides nothing
            # on them (they are outside every model's namespace either way).
            if p["metadata"]["namespace"] != AGENT_NAMESPACE
        )
    if parts[-1] == "events":
        return sorted(
            (e.get("reason"), e.get("message"), e["involvedObject"].get("uid"), e.get("firstTimestamp"), e.get("count"))
            for e in body.get("items", [])
        )
    if "configmaps" in parts:
        meta = body.get("metadata", {})
        return {
            "data": body.get("data") or {},
            "labels": meta.get("labels") or {},
            "owners": [(o.get("kind"), o.get("name")) for o in meta.get("ownerReferences") or []],
        }
    return body
