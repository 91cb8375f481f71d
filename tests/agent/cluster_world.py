"""A small cluster for end-to-end cache tests: SeaweedFS as S3, stand-in nodes, the real agent per node, and
pods run from the rendered manifests (tests/standins/kubelet.py) with the vLLM stand-in as their image."""

from __future__ import annotations

import io
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from node_agent.runtime.agent import NodeAgent
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.log import EventLog
from node_agent.runtime.pod_records import PodRecords
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.s3.weights_download import WeightsSource
from node_agent.runtime.weights import NodeCopies, WeightsLayout
from render import render_workloads
from tests.agent.fake_kube import FakeCluster
from tests.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3
from tests.standins.container_env import KUBERNETES_SERVICE, with_cluster_ips
from tests.standins.kubelet import PodRun, StandInNode, run_pod, start_pod
from tests.synth import ROOT
from warmstart.agent_config import agent_settings
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.loader import load_config
from warmstart.vllm_release import NEWEST, releases
from warmstart.workload import compile_cache_root, pod_records_root, weights_root

MODEL = "qwen3-6-35b-a3b"
PREFIX = "qwen3.6-35b-a3b/"


def write_model(client, bucket: str, *, seed: int, config: dict | None = None) -> None:
    """A tiny safetensors model (two shards), its config and tokenizer, as a user uploads one."""
    import torch
    from safetensors.torch import save

    generator = torch.Generator().manual_seed(seed)
    for shard in (1, 2):
        tensors = {f"model.layers.{shard}.{i}.weight": torch.randn(64, 256, generator=generator) for i in range(4)}
        client.put_object(
            Bucket=bucket,
            Key=f"{PREFIX}model-0000{shard}-of-00002.safetensors",
            Body=save(tensors),
            ChecksumAlgorithm="CRC64NVME",
        )
    body = json.dumps(config or {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64})
    client.put_object(Bucket=bucket, Key=f"{PREFIX}config.json", Body=body.encode(), ChecksumAlgorithm="CRC64NVME")
    client.put_object(
        Bucket=bucket,
        Key=f"{PREFIX}tokenizer.json",
        Body=random.Random(seed).randbytes(3000),
        ChecksumAlgorithm="CRC64NVME",
    )


@dataclass
class Node:
    stand_in: StandInNode
    agent: NodeAgent
    log: EventLog
    weights: NodeCopies

    @property
    def layout(self) -> NodeCacheLayout:
        return self.agent.layout


@dataclass
class World:
    server: SeaweedS3
    scratch: Path
    config: EnvironmentConfig
    cluster: FakeCluster = field(
        default_factory=lambda: FakeCluster()
    )  # looked up at each call (the cluster tier swaps it)
    # The stand-in image: the vLLM release the shipped configs serve and the PyTorch it pins.
    image_env: dict = field(
        default_factory=lambda: {"STANDIN_VLLM_VERSION": NEWEST, "STANDIN_TORCH_VERSION": releases()[NEWEST].torch}
    )

    @property
    def client(self):
        return self.server.client()

    def manifests(self, config: EnvironmentConfig | None = None, model: str = MODEL) -> tuple[dict, dict, list[dict]]:
        """The model's Deployment, its ConfigMaps and the cluster's Services (the model's, with the cluster IP the
        API server gives it, and the API server's own), rendered by the chart the stacks deploy."""
        out = self.scratch / f"dist-{time.monotonic_ns()}"
        (path,) = [p for p in render_workloads(config or self.config, out) if p.stem == model]
        objects = list(yaml.safe_load_all(io.StringIO(path.read_text())))
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        config_maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
        services = [KUBERNETES_SERVICE, *with_cluster_ips(o for o in objects if o["kind"] == "Service")]
        return deployment, config_maps, services

    def node(self, name: str, config: EnvironmentConfig | None = None, instance_type: str = "p5.48xlarge") -> Node:
        config = config or self.config
        stand_in = StandInNode(name, self.scratch / "nodes" / name)
        self.cluster.add_node(name, instance_type)
        log = EventLog(time.time, stream=open(os.devnull, "w"))
        settings = agent_settings(config, default_catalog()).model_copy(
            update={
                "cache_root": str(stand_in.host(compile_cache_root(config))),
                "weights_root": str(stand_in.host(weights_root(config))),
                "pod_records": str(stand_in.host(pod_records_root(config))),
                "last_use_touch_seconds": 3600,
            }
        )
        client = self.client
        weights = NodeCopies(
            source=WeightsSource(client, config.buckets.models.name, part_bytes=5 * 2**20, threads=4),
            layout=WeightsLayout(Path(settings.weights_root)),
            clock=time.time,
            log=log,
            reserve_bytes=0,
        )
        agent = NodeAgent(
            settings=settings,
            node=name,
            store=CacheStore(client, config.buckets.compile_cache),
            kube=KubeApi(self.cluster),
            layout=NodeCacheLayout(Path(settings.cache_root)),
            clock=time.time,
            log=log,
            weights=weights,
            records=PodRecords(Path(settings.pod_records)),
        )
        return Node(stand_in, agent, log, weights)

    @property
    def cluster_env(self) -> dict:
        """What every pod gets from the cluster: the S3 endpoint and credentials (Pod Identity on EKS)."""
        return {
            "AWS_ENDPOINT_URL": self.server.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
            "STANDIN_GPU_NAME": "NVIDIA H100 80GB HBM3",
            **self.image_env,
        }

    def schedule(self, node: Node, config: EnvironmentConfig | None = None) -> PodRun:
        deployment, config_maps, services = self.manifests(config)
        return start_pod(node.stand_in, deployment, config_maps, self.scratch / "pods", services=services)

    def serve(self, pod: PodRun) -> dict:
        """Runs the pod to its Ready point and lists it as Ready for the agents."""
        run_pod(pod, self.cluster_env)
        self.cluster.pods.append(pod.as_api_object(ready=True))
        return pod.report


def make_world(s3_server: SeaweedS3, scratch: Path, **model_overrides) -> World:
    client = s3_server.client()
    models_bucket, compile_bucket = s3_server.new_bucket(), s3_server.new_bucket()
    write_model(client, models_bucket, seed=1)
    base = load_config(ROOT / "config" / "prod.yaml")
    model = next(m for m in base.models if m.name == MODEL)
    model = model.model_copy(update={"s3_uri": f"s3://{models_bucket}/{PREFIX}", "replicas": 1, **model_overrides})
    buckets = base.buckets.model_copy(
        update={
            "compile_cache": compile_bucket,
            "models": base.buckets.models.model_copy(update={"name": models_bucket}),
        }
    )
    config = base.model_copy(update={"models": [model], "buckets": buckets})
    return World(server=s3_server, scratch=scratch, config=config)


def with_model(config: EnvironmentConfig, **changes) -> EnvironmentConfig:
    return config.model_copy(update={"models": [config.models[0].model_copy(update=changes)]})
