"""The engine's caches in the real packages of every supported release (make test-vllm): what the release writes
is what warmstart/vllm_releases/<release>.json recorded and contracts/engine_caches.py names, every library's cache
folder in a rendered pod is on the node's NVMe, and the log lines the agent reads of them are the release's own.

The pod is warmstart's rendered Deployment on a stand-in node (tests/real_vllm/pods.py): its container runs
tests/real_vllm/read_caches.py in place of vLLM, in the process environment kubelet builds (the image's ENV, the
rendered variables, HOME from the user) with the volumes at their container paths, and each library resolves its
own folder there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.engine_caches import VLLM_ROOT_FOLDER, named
from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime import vllm_log
from tests.agent.cluster_world import World
from tests.builders import raw
from tests.real_vllm import pods
from tests.real_vllm.record_caches import READER, defaults_section, read_caches
from tests.standins.kubelet import run_container
from tests.upstream.engine_caches_table import unnamed_folders
from warmstart.catalog import default_catalog
from warmstart.loader import parse_config
from warmstart.sizing import candidate_instances
from warmstart.vllm_release import releases, version_key
from warmstart.workload import COMPILE_CACHE_MOUNT

pytestmark = pytest.mark.real_vllm
CONTENT = f"{COMPILE_CACHE_MOUNT}/{COMPILE_CACHE_CONTENT}"


def test_what_the_release_writes_is_what_was_recorded_and_the_inventory_names(vllm_environment, tmp_path):
    version = vllm_environment.version
    read = read_caches(vllm_environment, tmp_path)
    assert read["vllm"] == version
    assert defaults_section(read, tmp_path) == releases()[version].caches, (
        f"vLLM {version}'s packages say otherwise: python -m tests.real_vllm.record_caches {version}"
    )
    assert unnamed_folders(releases()[version].caches) == []


@pytest.fixture(scope="module")
def pod_caches(vllm_environment, s3_server, tmp_path_factory) -> dict:
    """The library cache folders as the rendered pod's process resolves them (dev config, its first model, with
    the release's image)."""
    document = raw("dev")
    document["models"][0]["image"] = f"vllm/vllm-openai:v{vllm_environment.version}"
    document["models"] = document["models"][:1]
    config = parse_config(document)
    model = config.models[0]
    instance = candidate_instances(model, config, default_catalog())[0]
    world = World(server=s3_server, scratch=tmp_path_factory.mktemp("caches"), config=config, image_env={})
    node = world.node("node-caches", config, instance.instance_type)
    pod = pods.schedule(world, node, config, model.name, vllm_env=vllm_environment, instance=instance)
    container = {**pods.main_container(pod), "command": ["python3", str(READER)], "args": []}
    run_container(pod, container, pods.cluster_env(world), timeout=600)
    output = pod.outputs[-1].stdout
    (line,) = [text for text in output.splitlines() if text.startswith("VLLM-CACHES ")]
    return json.loads(line.removeprefix("VLLM-CACHES "))


def test_every_engine_cache_the_installed_release_writes_is_on_the_nodes_nvme(pod_caches):
    """Each library resolves its folder, in the pod, to its inventory folder in the configuration's cache folder
    (the hostPath on the node's NVMe that the next pod of the configuration mounts): none in HOME or /tmp."""
    found = [(name, path) for name, path in pod_caches["folders"] if path is not None]
    assert {name for name, _ in found} >= {"inductor", "triton", "flashinfer", "cute_dsl", "tilelang", "vllm"}
    for name, path in found:
        folder = VLLM_ROOT_FOLDER if name == "vllm" else named(name).folder
        assert path == f"{CONTENT}/{folder}" or path.startswith(f"{CONTENT}/{folder}/"), (name, path)


LOGGED = {
    # the agent's pattern, the module whose logger prints it, and the words of the line's format string
    "startup plan loaded": (vllm_log.STARTUP_PLAN["loaded"], "v1/worker/startup_plan.py", "Applying persisted"),
    "startup plan refused": (vllm_log.STARTUP_PLAN["refused"], "v1/worker/startup_plan.py", "Startup plan not"),
    "startup plan saved": (vllm_log.STARTUP_PLAN["written"], "v1/worker/startup_plan.py", "Saved startup plan"),
    "autotune file": (vllm_log.AUTOTUNE_FILE, "model_executor/warmup/kernel_warmup.py", "Using FlashInfer autotune"),
    "autotune ran": (vllm_log.AUTOTUNE_RAN, "model_executor/warmup/kernel_warmup.py", "Running FlashInfer autotune"),
}
_FORMAT = re.compile(r"%(?:\.\d+)?[sdf]")
_SAMPLE = {"s": "/compile-cache/cache/vllm/x", "d": "8192", "f": "70.00"}


def _format_strings(source: str, words: str) -> list[str]:
    """The logger format strings of a module that begin with `words` (implicitly joined literals included)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            text = node.args[0].value
            if isinstance(text, str) and text.startswith(words):
                found.append(text)
    return found


@pytest.mark.parametrize("line", sorted(LOGGED))
def test_the_engine_cache_lines_the_agent_reads_are_the_releases_own(vllm_environment, line):
    """Where a release prints the line (0.34.0 on; older releases have no such cache), the agent's pattern matches
    the line its format string prints."""
    pattern, module, words = LOGGED[line]
    path = vllm_environment.site_packages / "vllm" / module
    source = path.read_text() if path.exists() else ""
    formats = _format_strings(source, words)
    since_startup_plan = version_key(vllm_environment.version) >= version_key("0.34.0")
    if not since_startup_plan:
        assert formats == [], f"vLLM {vllm_environment.version} prints {line}: the inventory says it came in 0.34.0"
        return
    assert formats, f"vLLM {vllm_environment.version} no longer prints {line} in {module}"
    for text in formats:
        printed = _FORMAT.sub(lambda m: _SAMPLE[m.group(0)[-1]], text)
        assert pattern.search(f"(EngineCore pid=7) INFO 12-05 10:00:00 [{Path(module).name}:1] {printed}"), text
