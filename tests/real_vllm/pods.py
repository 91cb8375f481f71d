"""A rendered vLLM pod on a stand-in node with the real vLLM as its image: what the real vLLM tier and the GPU
script (bench/gpu_vllm_cold_start.py) both run. The node's agent, the pod's entry step and its node copy are the
real ones (tests/agent/cluster_world.py); the image is tests/real_vllm/image.py's."""

from __future__ import annotations

import json

from tests.agent.cluster_world import Node, World
from tests.real_vllm.environment import VllmEnvironment
from tests.real_vllm.image import image_for_node
from tests.s3_server import ACCESS_KEY, SECRET_KEY
from tests.standins.kubelet import PodRun, run_container, start_pod
from warmstart.catalog import GpuInstance
from warmstart.config.environment import EnvironmentConfig

REPORT_PREFIX = "REAL-VLLM-REPORT "


def cluster_env(world: World) -> dict[str, str]:
    """What admission adds to every container here: the test S3 server's address and credentials (on EKS, Pod
    Identity's credential variables and no endpoint); the test server is path-style."""
    return {
        "AWS_ENDPOINT_URL": world.server.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
    }


def schedule(
    world: World,
    node: Node,
    config: EnvironmentConfig,
    model: str,
    *,
    vllm_env: VllmEnvironment,
    instance: GpuInstance,
    engine: str = "probe",
    service_links_on: bool = False,
) -> PodRun:
    """The model's pod bound to `node`, its volumes set up; `service_links_on` renders it as warmstart did before
    it turned service links off (the API server then defaults the field to true)."""
    deployment, config_maps, services = world.manifests(config, model)
    if service_links_on:
        deployment["spec"]["template"]["spec"].pop("enableServiceLinks", None)
    image = image_for_node(
        vllm_env, instance, world.scratch / "image" / f"{instance.instance_type}-{engine}", engine=engine
    )
    return start_pod(node.stand_in, deployment, config_maps, world.scratch / "pods", services=services, image_env=image)


def run_init_containers(pod: PodRun, env: dict[str, str]) -> None:
    for init in pod.spec.get("initContainers", []):
        run_container(pod, init, env, timeout=180)


def main_container(pod: PodRun) -> dict:
    (main,) = pod.spec["containers"]
    return main


def probe_report(pod: PodRun, env: dict[str, str]) -> dict:
    """Runs the main container with the probe as vLLM's start and returns its report (errors included)."""
    try:
        run_container(pod, main_container(pod), env, timeout=600)
    except AssertionError:
        pass  # a failed start still prints its report
    output = pod.outputs[-1]
    lines = [line for line in output.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    if not lines:
        raise AssertionError(f"the container printed no report\n{output.stdout[-3000:]}\n{output.stderr[-3000:]}")
    report = json.loads(lines[-1].removeprefix(REPORT_PREFIX))
    report["entry_output"] = [line for line in output.stdout.splitlines() if line.startswith("warmstart:")]
    return report
