"""`warmstart status`: per model, how many GPU nodes are targeted and how many are ready, for the weights
cache, the compile cache and the image cache (as HyperPod reports TARGET / READY), from API objects."""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.agent_settings import AGENT_NAMESPACE, COMPILE_USE_LABEL_DOMAIN, NODE_LABEL_DOMAIN, WEIGHTS_LABEL_DOMAIN
from warmstart.catalog import Catalog
from warmstart.config import EnvironmentConfig
from warmstart.workload import image_cache_name, plan_model

GPU_POOL_LABEL = ("karpenter.sh/nodepool", "gpu")
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
COMPILE_READY = {"restored", "present", "published"}
# The API paths the status needs (read with the user's kubeconfig).
NODES_PATH = "/api/v1/nodes"
DAEMON_SETS_PATH = f"/apis/apps/v1/namespaces/{AGENT_NAMESPACE}/daemonsets"


@dataclass(frozen=True)
class CacheCount:
    state: str  # off | no-nodes | ready | warming | cold
    target: int = 0
    ready: int = 0
    refused: int = 0  # weights: nodes without instance store, where the agent does not fill

    def __str__(self) -> str:
        text = self.state if self.state == "off" else f"{self.state} {self.ready}/{self.target}"
        return text + (f" ({self.refused} no-nvme)" if self.refused else "")


@dataclass(frozen=True)
class CompileUse:
    """What vLLM did with the compile cache on each node's last observed pod start."""

    hits: int = 0
    misses: int = 0

    def __str__(self) -> str:
        return f"{self.hits} hit, {self.misses} miss" if self.hits + self.misses else "none yet"


def _count(target: int, ready: int, refused: int = 0) -> CacheCount:
    if target == 0:
        return CacheCount("no-nodes", 0, 0)
    return CacheCount("ready" if ready >= target else ("warming" if ready else "cold"), target, ready, refused)


def model_status(
    config: EnvironmentConfig, catalog: Catalog, nodes: dict, daemon_sets: dict
) -> dict[str, dict[str, CacheCount | CompileUse]]:
    gpu_nodes = [
        n for n in nodes.get("items", []) if n["metadata"].get("labels", {}).get(GPU_POOL_LABEL[0]) == GPU_POOL_LABEL[1]
    ]
    by_name = {d["metadata"]["name"]: d for d in daemon_sets.get("items", [])}
    result: dict[str, dict[str, CacheCount | CompileUse]] = {}
    for model in config.models:
        plan = plan_model(model, config, catalog)
        types = set(model.instance_types or config.compute.gpu_pool.instance_types)
        targets = [n for n in gpu_nodes if n["metadata"]["labels"].get(INSTANCE_TYPE_LABEL) in types]

        def labelled(domain: str, accepted: set[str]) -> int:
            return sum(n["metadata"]["labels"].get(f"{domain}/{model.name}") in accepted for n in targets)

        weights = CacheCount("off")
        if plan.weights_cache:
            ready, refused = labelled(WEIGHTS_LABEL_DOMAIN, {"ready"}), labelled(WEIGHTS_LABEL_DOMAIN, {"no-nvme"})
            weights = _count(len(targets), ready, refused)
        compile_cache = (
            _count(len(targets), labelled(NODE_LABEL_DOMAIN, COMPILE_READY))
            if plan.compile_cache
            else CacheCount("off")
        )
        if config.image_preload.mode == "off":
            image = CacheCount("off")
        else:
            status = by_name.get(image_cache_name(model.image), {}).get("status", {})
            image = _count(status.get("desiredNumberScheduled", len(targets)), status.get("numberReady", 0))
        use = CompileUse(labelled(COMPILE_USE_LABEL_DOMAIN, {"hit"}), labelled(COMPILE_USE_LABEL_DOMAIN, {"miss"}))
        result[model.name] = {"weights": weights, "compile": compile_cache, "use": use, "image": image}
    return result


def render_status(config: EnvironmentConfig, statuses: dict[str, dict[str, CacheCount | CompileUse]]) -> str:
    rows: list[tuple[str, ...]] = [("MODEL", "WEIGHTS", "COMPILE CACHE", "LAST POD PER NODE", "IMAGE")]
    rows += [
        (name, *(str(s[column]) for column in ("weights", "compile", "use", "image"))) for name, s in statuses.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"environment {config.name}: READY/TARGET GPU nodes per cache"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows]
    return "\n".join(lines)
