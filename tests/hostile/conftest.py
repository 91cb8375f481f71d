"""A node whose pods, S3 objects and neighbours misbehave: the real agent (SeaweedFS as S3, the fake API server),
the real entry step and node-copy endpoint, and files written the way a compromised or buggy vLLM pod could
write them. Shared by the hostile-workload tests (docs/trust-model.md lists what each one covers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from model_workload.runtime.vllm_entry import RECORD_FILE, RECORD_VERSION
from tests.admission_policy import pod, policy, roots  # noqa: F401 - fixtures of the admission tests
from tests.agent.cluster_world import MODEL, Node, World, make_world
from tests.agent.conftest import clock, log  # noqa: F401 - fixtures of the node copy's tests
from tests.agent.fake_kube import pod_uid, vllm_pod
from tests.agent.weights_world import model_bucket  # noqa: F401 - a fixture
from tests.hostile.hostile_world import tree_state


@dataclass
class HostileNode:
    world: World
    node: Node

    @property
    def records_root(self) -> Path:
        records = self.node.agent.records
        assert records is not None
        return records.folder

    def pod_folder(self, uid: str) -> Path:
        """The folder kubelet made for pod `uid` (what its container mounts at /warmstart-pods)."""
        folder = self.records_root / uid
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def add_pod(self, name: str, *, model: str = MODEL, ready: bool = True) -> str:
        """A vLLM pod of `model` running on the node (as the API server lists it); returns its UID."""
        listed = vllm_pod(name=name, node=self.node.stand_in.name, model=model, host_path="/x", ready=ready)
        self.world.cluster.pods.append(listed)
        return pod_uid(name)

    def record(self, uid: str, **fields) -> Path:
        """A well-formed record of pod `uid`, with `fields` replaced (as the entry step writes it)."""
        document = {
            "version": RECORD_VERSION,
            "model": MODEL,
            "phase": "started",
            "started_at": 1.0,
            "boot": "0" * 32,
            "weights": {"source": "s3", "key": None, "reason": "streaming"},
            "compile": {"fingerprint": None, "hash_dirs": []},
            **fields,
        }
        path = self.pod_folder(uid) / RECORD_FILE
        path.write_text(json.dumps(document))
        return path

    def refusals(self) -> list[dict]:
        return [e for e in self.node.log.events if e["event"] == "input-refused"]


@pytest.fixture
def hostile(tmp_path, s3_server) -> HostileNode:
    world = make_world(s3_server, tmp_path)
    return HostileNode(world, world.node("node-a"))


@pytest.fixture
def sentinels(tmp_path) -> Callable[[], dict[str, tuple]]:
    """Files a hostile pod would love to touch (another folder of the node, a file the agent can read); the
    callable returns their state, to compare before and after."""
    root = tmp_path / "sentinels"
    (root / "outside").mkdir(parents=True)
    (root / "outside" / "victim.json").write_text('{"precious": true}')
    (root / "etc").mkdir()
    (root / "etc" / "shadow").write_text("root:$6$secret:19000:0:99999:7:::\n")
    return lambda: tree_state(root)
