"""The engine tier's cluster: vLLM's CPU build serving warmstart's rendered pods on stand-in nodes.

Each start is the model's rendered Deployment as kubelet would run it (tests/standins/kubelet.py: its command,
arguments and environment, service links and all, its volumes at their container paths; the entry step and the
node copy are the real ones), with the serving image's `vllm` being the release's CPU build
(tests/real_vllm/image.py, engine "server"). The S3 server is SeaweedFS; every node runs the real node agent
(tests/agent/cluster_world.py), which reads the container's log as kubelet keeps it.

What differs from a GPU node, each named here and nowhere else:
- LISTEN_ADDRESS: vLLM listens on loopback (this sandbox serves on no other address);
- CPU_NODE_ENV: the CPU engine's own settings (its KV-cache size, and its workers' cores at tensor parallelism
  above 1); node-wide, the same on every node, so they split no compile hash between nodes.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from contracts.engine_caches import UNLISTED, cache_of
from contracts.node_layout import COMPILE_CACHE_CONTENT
from contracts.pod_labels import VLLM_CONTAINER
from model_workload.runtime.vllm_entry import vllm_hash_dirs
from node_agent.runtime.compile_manifest import VLLM_FOLDER
from node_agent.runtime.start_tracker import StartTracker
from node_agent.runtime.vllm_log import VllmStart, container_log_path, parse_start
from tests.agent.cluster_world import Node, World
from tests.engine.scraping import Scraping
from tests.engine.server import ServerRun
from tests.real_vllm import pods
from tests.real_vllm.environment import VllmEnvironment, pinned_version
from tests.real_vllm.image import image_for_node
from tests.s3_server import SeaweedS3
from tests.standins.kubelet import PodRun, run_container, start_pod
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.loader import parse_config, read_yaml
from warmstart.sizing import candidate_instances
from warmstart.vllm_release import release
from warmstart.workload import VLLM_PORT

ROOT = Path(__file__).resolve().parents[2]
LISTEN_ADDRESS = ("--host=0.0.0.0", "--host=127.0.0.1")
# 1 GiB of KV cache (the default sizes it from the machine's memory, which two CPU workers would share).
CPU_NODE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
POD_LOGS = "var-log-pods"
MULTI_GPU_TYPE = "g6e.12xlarge"  # dev's L40S family with 4 GPUs
OTHER_GPU_TYPE = "g6.xlarge"  # an L4: the same architecture family as dev's L40S (sm_89), another GPU name
START_TIMEOUT = 600


def cpu_node_env(tensor_parallel_size: int) -> dict[str, str]:
    """At tensor parallelism above 1 each CPU worker gets its own core (vLLM's automatic binding needs a NUMA node
    per worker, which one-socket machines lack)."""
    if tensor_parallel_size == 1:
        return dict(CPU_NODE_ENV)
    return {**CPU_NODE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "|".join(str(core) for core in range(tensor_parallel_size))}


def engine_config(
    models_bucket: str, compile_bucket: str, version: str, tensor_parallel_size: int
) -> EnvironmentConfig:
    """config/dev.yaml with its buckets on the local S3 server, one model (its first) serving vLLM `version` at
    `tensor_parallel_size`, and both caches on. At tensor parallelism above 1 the node pool is MULTI_GPU_TYPE (dev's
    single-GPU nodes cannot hold it)."""
    document = read_yaml(ROOT / "config" / "dev.yaml")
    document["buckets"]["compile_cache"] = compile_bucket
    document["buckets"]["models"]["name"] = models_bucket
    first = document["models"][0]
    document["models"] = [
        {
            **{k: v for k, v in first.items() if k != "torch_version"},
            "s3_uri": f"s3://{models_bucket}/{first['name']}/",
            "image": f"vllm/vllm-openai:v{version}",
            # A release warmstart has no facts of (a CPU build between two recorded ones) names its PyTorch.
            **({} if release(version) else {"torch_version": pinned_version(version, "torch", "vllm-cpu")}),
            "tensor_parallel_size": tensor_parallel_size,
            # dev's model autoscales: its pods carry the scrape annotations (the autoscaler sets the count).
            **({} if first.get("autoscaling") else {"replicas": 1}),
        }
    ]
    document["caches"] = {**document.get("caches", {}), "compile": True, "weights": True}
    if tensor_parallel_size > 1:
        document["compute"]["gpu_pool"]["instance_types"] = [MULTI_GPU_TYPE]
    return parse_config(document, source="tests/engine/chain.py")


def upload_model(server: SeaweedS3, bucket: str, prefix: str, folder: Path) -> None:
    client = server.client()
    for path in sorted(folder.iterdir()):
        client.put_object(
            Bucket=bucket, Key=f"{prefix}{path.name}", Body=path.read_bytes(), ChecksumAlgorithm="CRC64NVME"
        )


@dataclass
class Start:
    """One container start: what the client saw, what vLLM said, what the node's compile folder held."""

    case: str
    node: str
    first_completion_s: float
    answer: dict
    vllm: VllmStart
    lines: list[tuple[float, str]]
    entry: list[str]
    hash_dirs_before: list[str]
    hash_dirs_after: list[str]
    files_before: dict[str, tuple[int, str]]  # path -> (mtime_ns, sha256) of every file in the config's folder
    files_after: dict[str, tuple[int, str]]
    judged: list[dict] = field(default_factory=list)  # the agent's compile-hit/-miss events for this start

    @property
    def rewritten(self) -> list[str]:
        """Files that were there before the start and were written during it."""
        return sorted(
            p
            for p, (mtime, _) in self.files_before.items()
            if p in self.files_after and self.files_after[p][0] != mtime
        )

    @property
    def added(self) -> list[str]:
        return sorted(set(self.files_after) - set(self.files_before))


def summary(start: Start) -> dict:
    """What a start's report line says: the times and what vLLM and the agent said."""
    return {
        "node": start.node,
        "first_completion_s": start.first_completion_s,
        "engine_s": start.vllm.engine_seconds,  # vLLM's init engine phase: the compile (or its load) and warm-up
        "compile_cache": start.vllm.compile_cache,
        "load_failure": start.vllm.load_failure,
        "kernels_added": len(kernels({p: start.files_after[p] for p in start.added})),
        "judged": [(e["event"], e.get("cause")) for e in start.judged],
        "engine_caches": sorted(engine_caches_in(start.files_after)),  # what the folder holds after the start
    }


def engine_caches_in(files) -> set[str]:
    """The inventory caches (contracts/engine_caches.py) a snapshot of a configuration's folder holds files of."""
    found = set()
    for path in files:
        if path.startswith(f"{COMPILE_CACHE_CONTENT}/"):
            cache = cache_of(path.removeprefix(f"{COMPILE_CACHE_CONTENT}/"))
            found.add(cache.name if cache else UNLISTED)
    return found


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    found = {}
    for base, _, names in os.walk(folder):
        for name in names:
            path = Path(base, name)
            if path.is_symlink() or not path.is_file():
                continue
            found[str(path.relative_to(folder))] = (
                path.stat().st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return found


KERNEL_SUFFIXES = (".so", ".cpp", ".py")


def kernels(files: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
    """The compiled kernels: Inductor's generated code and the libraries built from it. Not its lock files, not
    AOTAutograd's cache entries (a start that compiles again after a load failure adds one), not vLLM's own AOT
    artifact (rank_*/model, saved again on such a start)."""
    return {
        p: v
        for p, v in files.items()
        if "/inductor_cache/" in f"/{p}" and "/aotautograd/" not in f"/{p}" and p.endswith(KERNEL_SUFFIXES)
    }


class EngineCluster:
    """Stand-in nodes with real agents, serving the model through the release's CPU build."""

    def __init__(
        self, server: SeaweedS3, scratch: Path, env: VllmEnvironment, model_folder: Path, tensor_parallel_size: int = 1
    ):
        self.env = env
        models_bucket, compile_bucket = server.new_bucket(), server.new_bucket()
        self.config = engine_config(models_bucket, compile_bucket, env.version, tensor_parallel_size)
        self.model = self.config.models[0]
        upload_model(server, models_bucket, f"{self.model.name}/", model_folder)
        self.instance = candidate_instances(self.model, self.config, default_catalog())[0]
        self.world = World(server=server, scratch=scratch, config=self.config, image_env={})
        self.cluster_env = {**pods.cluster_env(self.world), **cpu_node_env(tensor_parallel_size)}
        self.nodes: dict[str, Node] = {}
        self.scraping: Scraping | None = None  # the environment's Prometheus, where a test scrapes the pods
        self._templates: dict[str, dict] = {}  # pod uid -> its Deployment's pod template metadata

    def node(self, name: str, instance_type: str | None = None) -> Node:
        """A node of the model's instance type, or of `instance_type` (another GPU: the pool then lists it, and only
        the agent's key for the GPU changes, the configuration's fingerprint not)."""
        if name not in self.nodes:
            config = self.config
            if instance_type is not None:
                pool = config.compute.gpu_pool.model_copy(update={"instance_types": [instance_type]})
                config = config.model_copy(update={"compute": config.compute.model_copy(update={"gpu_pool": pool})})
            node = self.world.node(name, config, instance_type or self.instance.instance_type)
            node.agent.starts = StartTracker(
                kube=node.agent.kube,
                node=name,
                pod_logs=node.stand_in.root / POD_LOGS,
                layout=node.agent.layout,
                metrics=node.agent.metrics,
                log=node.log,
            )
            self.nodes[name] = node
            if self.scraping is not None:
                self.scraping.agent(name, node.agent, self.config)
        return self.nodes[name]

    @property
    def fingerprint(self) -> str:
        """The configuration's compile-cache fingerprint, as the agents are told it."""
        node = next(iter(self.nodes.values()))
        return node.agent.models[self.model.name].model.compile_cache.fingerprint

    def config_folder(self, node: Node) -> Path:
        return node.layout.config_dir(self.model.name, self.fingerprint)

    def schedule(self, node: Node) -> PodRun:
        deployment, config_maps, services = self.world.manifests(self.config, self.model.name)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert LISTEN_ADDRESS[0] in container["args"], container["args"]
        container["args"] = [LISTEN_ADDRESS[1] if a == LISTEN_ADDRESS[0] else a for a in container["args"]]
        image = image_for_node(
            self.env, self.instance, self.world.scratch / "image" / node.stand_in.name, engine="server"
        )
        pod = start_pod(
            node.stand_in, deployment, config_maps, self.world.scratch / "pods", services=services, image_env=image
        )
        self._templates[pod.uid] = deployment["spec"]["template"]["metadata"]
        return pod

    def start(
        self, case: str, node: Node, *, keep_serving: bool = False, tick: bool = True
    ) -> tuple[Start, ServerRun | None]:
        """The model's pod on `node`, to its first completion; once it answers, the pod is listed Ready and the node's
        agent ticks (it judges the start from vLLM's log and publishes what is new; not with `tick=False`). The
        server then stops, unless `keep_serving` (the caller stops it)."""
        pod = self.schedule(node)
        folder = self.config_folder(node)
        cache_root = pod.volumes["compile-cache"] / "cache" / VLLM_FOLDER
        before, files_before = vllm_hash_dirs(cache_root), snapshot(folder)
        pods.run_init_containers(pod, self.cluster_env)
        created = time.time()
        server = ServerRun(run_container(pod, pods.main_container(pod), self.cluster_env, background=True))
        try:
            seconds, answer = server.first_completion(self.model.name, VLLM_PORT, START_TIMEOUT)
            if self.scraping is not None:
                server.on_stop(self.scraping.vllm(pod, self._templates[pod.uid]))
            server.write_cri_log(
                container_log_path(node.stand_in.root / POD_LOGS, pod.namespace, pod.name, pod.uid, VLLM_CONTAINER, 0)
            )
            listed = len(node.log.events)
            self.world.cluster.pods.append(_ready(pod, created, time.time()))
            if tick:
                node.agent.tick()
            judged = [e for e in list(node.log.events)[listed:] if e["event"].startswith("compile-")]
        except BaseException:
            server.stop()
            raise
        if not keep_serving:
            server.stop()
        start = Start(
            case=case,
            node=node.stand_in.name,
            first_completion_s=round(seconds, 2),
            answer=answer,
            vllm=parse_start(server.lines),
            lines=list(server.lines),
            entry=[text for _, text in server.lines if text.startswith("warmstart:")],
            hash_dirs_before=before,
            hash_dirs_after=vllm_hash_dirs(cache_root),
            files_before=files_before,
            files_after=snapshot(folder),
            judged=judged,
        )
        return start, (server if keep_serving else None)


def _ready(pod: PodRun, created: float, ready: float) -> dict:
    """The pod as the API server lists it once Ready, with the times the agent's start timeline reads."""
    listed = pod.as_api_object(ready=True)
    listed["metadata"]["creationTimestamp"] = _stamp(created)
    listed["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": _stamp(ready)}]
    listed["status"]["containerStatuses"] = [{"name": VLLM_CONTAINER, "restartCount": 0}]
    return listed


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
