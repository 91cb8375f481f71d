"""The engine tier's pods as the environment's Prometheus scrapes them: a real Prometheus (the shipped chart's
version) with the chart's `kubernetes-pods` job and warmstart's rendered global settings and alert rules, scraping
each node's real agent and each serving vLLM through the annotations and labels their rendered pod templates carry
(tests/monitoring/prometheus.py gives the pod discovery's labels).

Each agent serves on its own loopback address (127.0.0.<10 + n>) at the configured metrics port, as each agent pod
has its own IP; vLLM serves on 127.0.0.1 (tests/engine/chain.py LISTEN_ADDRESS), so that is its pod's IP here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from construct_kit.serving_metrics import prometheus_values
from kube.scraping import scrape_annotations
from node_agent.chart import LABELS as AGENT_LABELS
from node_agent.runtime.agent import NodeAgent
from observability.alerts import alert_rules
from tests.monitoring.prometheus import PodTargets, PrometheusServer, kubernetes_pods_job, pod_target
from tests.standins.kubelet import PodRun
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig

AGENT_NAMESPACE = "warmstart-system"
SCRAPE_INTERVAL = "1s"  # the rendered 15 s, compressed: the tier's starts take a minute, not an hour
VLLM_POD_IP = "127.0.0.1"


class Scraping:
    def __init__(self, root: Path, config: EnvironmentConfig) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.pods = PodTargets(root / "pods.json")
        job = kubernetes_pods_job(
            discovery={"file_sd_configs": [{"files": [str(self.pods.path)], "refresh_interval": "1s"}]},
            scrape_interval=SCRAPE_INTERVAL,
        )
        settings = {"global": prometheus_values()["server"]["global"], "scrape_configs": [job]}
        rules = {"groups": alert_rules(config, default_catalog())}
        self.server = PrometheusServer(root / "prometheus", config=settings, rules=rules).start()
        self._servers: list = []

    def agent(self, node: str, agent: NodeAgent, config: EnvironmentConfig) -> None:
        """The node's agent serving its metrics, as its DaemonSet pod does, and listed as that pod."""
        address = f"127.0.0.{10 + len(self._servers)}"
        self._servers.append(agent.metrics.serve(config.metrics.port, address))
        # The loop the agent's process runs for it (node_agent/runtime/__main__.py), whose progress it reports;
        # here the tier calls the agent's rounds itself.
        agent.liveness.register("tick", agent.settings.poll_seconds)
        self.pods.add(
            f"agent/{node}",
            pod_target(
                namespace=AGENT_NAMESPACE, name=f"warmstart-agent-{node}", ip=address, node=node,
                labels=AGENT_LABELS, annotations=scrape_annotations(config.metrics.port),
            ),
        )  # fmt: skip

    def vllm(self, pod: PodRun, template: dict) -> Callable[[], None]:
        """The serving pod, with its template's labels and annotations; returns what removes it."""
        key = f"vllm/{pod.uid}"
        self.pods.add(
            key,
            pod_target(
                namespace=pod.namespace, name=pod.name, ip=VLLM_POD_IP, node=pod.node.name,
                labels=template.get("labels", {}), annotations=template.get("annotations", {}),
            ),
        )  # fmt: skip
        return lambda: self.pods.remove(key)

    def stop(self) -> None:
        self.server.stop()
        for server in self._servers:
            server.shutdown()
            server.server_close()
