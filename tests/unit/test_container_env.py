"""The kubelet stand-in builds a container's environment as kubelet v1.35 and containerd v2.2 do
(tests/standins/container_env.py): what vLLM really reads at start, service links included."""

from __future__ import annotations

import copy

import pytest
import yaml

from render import render_workloads
from tests.standins.container_env import (
    KUBERNETES_SERVICE,
    expand,
    expanded_command,
    kubelet_environment,
    process_environment,
    service_variables,
    with_cluster_ips,
)
from tests.synth import ROOT
from warmstart.loader import load_config

MODEL = "llama-3-3-70b"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("dist")
    (path,) = [p for p in render_workloads(load_config(ROOT / "config" / "prod.yaml"), out) if p.stem == MODEL]
    return list(yaml.safe_load_all(path.read_text()))


def _bound(deployment: dict, **spec_changes) -> dict:
    template = copy.deepcopy(deployment["spec"]["template"])
    spec = {**template["spec"], "nodeName": "ip-10-0-1-2.ec2.internal", **spec_changes}
    spec = {k: v for k, v in spec.items() if v is not None}
    return {
        "metadata": {**template["metadata"], "name": "vllm-abc", "namespace": MODEL, "uid": "0e1f-uid"},
        "spec": spec,
        "status": {"podIP": "10.0.3.4", "hostIP": "10.0.1.2"},
    }


def _vllm_env(rendered: list[dict], **spec_changes) -> dict[str, str]:
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    services = [KUBERNETES_SERVICE, *with_cluster_ips(o for o in rendered if o["kind"] == "Service")]
    pod = _bound(deployment, **spec_changes)
    (container,) = pod["spec"]["containers"]
    return kubelet_environment(pod, container, services=services)


def test_the_model_service_would_have_set_vllm_port_before_service_links_were_turned_off(rendered):
    """What crashed every vLLM 0.21.0 pod: the Service `vllm` of the model's namespace gives VLLM_PORT a URI."""
    before = _vllm_env(rendered, enableServiceLinks=None)  # the API server's default: true
    assert before["VLLM_PORT"].startswith("tcp://172.20.") and before["VLLM_PORT"].endswith(":8000")
    assert {"VLLM_SERVICE_HOST", "VLLM_SERVICE_PORT", "VLLM_SERVICE_PORT_HTTP", "VLLM_PORT_8000_TCP_ADDR"} <= set(
        before
    )
    after = _vllm_env(rendered)
    assert after["KUBERNETES_SERVICE_HOST"] == "172.20.0.1" and after["KUBERNETES_PORT"] == "tcp://172.20.0.1:443"
    assert not [
        name
        for name in after
        if name.startswith("VLLM_")
        and name not in {"VLLM_ASSETS_CACHE", "VLLM_CACHE_ROOT", "VLLM_ENABLE_STARTUP_PLAN"}  # warmstart's own
    ]


def test_a_service_named_after_a_programs_prefix_sets_its_variables_only_with_service_links_on():
    agent = {"metadata": {"name": "warmstart-agent", "namespace": "warmstart-system"}}
    service = {
        "metadata": {"name": "warmstart", "namespace": "warmstart-system"},
        "spec": {"clusterIP": "172.20.9.9", "ports": [{"port": 9400}]},
    }
    on = service_variables([service], agent["metadata"]["namespace"], True)
    assert on == {
        "WARMSTART_SERVICE_HOST": "172.20.9.9",
        "WARMSTART_SERVICE_PORT": "9400",
        "WARMSTART_PORT": "tcp://172.20.9.9:9400",
        "WARMSTART_PORT_9400_TCP": "tcp://172.20.9.9:9400",
        "WARMSTART_PORT_9400_TCP_PROTO": "tcp",
        "WARMSTART_PORT_9400_TCP_PORT": "9400",
        "WARMSTART_PORT_9400_TCP_ADDR": "172.20.9.9",
    }
    assert service_variables([service], "warmstart-system", False) == {}


def test_only_services_with_a_cluster_ip_of_the_pods_namespace_and_the_api_servers_own():
    services = [
        KUBERNETES_SERVICE,
        {
            "metadata": {"name": "kubernetes", "namespace": "other"},
            "spec": {"clusterIP": "172.20.5.5", "ports": [{"port": 1}]},
        },
        {"metadata": {"name": "metrics", "namespace": "ns"}, "spec": {"clusterIP": "None", "ports": [{"port": 9400}]}},
        {
            "metadata": {"name": "elsewhere", "namespace": "other"},
            "spec": {"clusterIP": "172.20.5.6", "ports": [{"port": 2}]},
        },
        {
            "metadata": {"name": "v6-svc", "namespace": "ns"},
            "spec": {"clusterIP": "fd00::5", "ports": [{"port": 80, "protocol": "UDP"}]},
        },
    ]
    variables = service_variables(services, "ns", True)
    assert variables["KUBERNETES_SERVICE_HOST"] == "172.20.0.1" and variables["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert not [n for n in variables if n.startswith(("METRICS_", "ELSEWHERE_"))]
    assert variables["V6_SVC_PORT"] == "udp://[fd00::5]:80" and variables["V6_SVC_PORT_80_UDP_PROTO"] == "udp"
    assert service_variables(services, "ns", False).keys() == {n for n in variables if n.startswith("KUBERNETES_")}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)-$(B)", "1-svc"),
        ("$$(A)", "$(A)"),  # an escaped reference is kept as written
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$(A", "$(A"),
        ("cost $5 and $", "cost $5 and $"),
        ('{"x":"$(A)"}', '{"x":"1"}'),
        ("$(( $(date +%s) + ${WAIT} ))", "$(( $(date +%s) + ${WAIT} ))"),  # the wait script is left alone
    ],
)
def test_dollar_references_expand_as_kubelet_does(text, expanded):
    assert expand(text, {"A": "1"}, {"B": "svc", "A": "not-this-one"}) == expanded


def test_env_follows_kubelets_order_envfrom_then_env_then_service_links():
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
        "spec": {"nodeName": "n1", "serviceAccountName": "sa"},
        "status": {"podIP": "10.0.0.7", "hostIP": "10.0.0.1"},
    }
    container = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
            {"configMapRef": {"name": "gone", "optional": True}},
        ],
        "env": [
            {"name": "CFG_A", "value": "from env"},  # env replaces envFrom
            {"name": "REF_LATER", "value": "$(LATER)"},  # declared after: not yet known
            {"name": "LATER", "value": "l"},
            {"name": "SVC_SERVICE_HOST", "value": "mine"},  # a declared variable replaces the service link
            {"name": "USES_SVC", "value": "$(SVC_SERVICE_PORT)"},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "EMPTY"},
        ],
    }
    service = {
        "metadata": {"name": "svc", "namespace": "ns"},
        "spec": {"clusterIP": "172.20.1.1", "ports": [{"port": 81}]},
    }
    env = kubelet_environment(pod, container, services=[service], config_maps={"settings": {"A": "cm", "B": "cm-b"}})
    assert env["CFG_A"] == "from env" and env["CFG_B"] == "cm-b"
    assert env["REF_LATER"] == "$(LATER)" and env["LATER"] == "l"
    assert env["SVC_SERVICE_HOST"] == "mine" and env["USES_SVC"] == "81"
    assert (env["UID"], env["NODE"], env["APP"], env["IP"], env["EMPTY"]) == ("u-1", "n1", "x", "10.0.0.7", "")
    with pytest.raises(AssertionError, match="settings2"):
        kubelet_environment(pod, {"name": "c", "envFrom": [{"configMapRef": {"name": "settings2"}}]}, services=[])


def test_the_image_env_lies_beneath_kubelets_and_home_comes_from_the_user():
    env = process_environment(
        {"A": "kubelet", "PATH": "/kube"}, image_env={"A": "image", "B": "image"}, hostname="vllm-abc"
    )
    assert env == {"PATH": "/kube", "HOSTNAME": "vllm-abc", "A": "kubelet", "B": "image", "HOME": "/root"}
    assert process_environment({}, image_env={"HOME": "/home/u"}, hostname="h")["HOME"] == "/home/u"


def test_command_and_args_expand_against_kubelets_variables_only():
    container = {"command": ["run", "$(A)"], "args": ["--x=$(IMAGE_ONLY)", "$$(A)"]}
    assert expanded_command(container, {"A": "1"}) == ["run", "1", "--x=$(IMAGE_ONLY)", "$(A)"]


def test_a_dollar_in_a_configured_value_reaches_vllm_as_written(tmp_path):
    """kubelet turns `$$` into `$` in env values and arguments: the chart doubles every `$`, so vLLM sees what the
    config says (and what the compile-cache key hashed)."""
    config = load_config(ROOT / "config" / "prod.yaml")
    model = next(m for m in config.models if m.name == MODEL)
    model = model.model_copy(update={"vllm_env": {"VLLM_SAMPLE": "a$$b$c"}, "compilation_config": {"note": "$$x"}})
    config = config.model_copy(update={"models": [model]})
    (path,) = [p for p in render_workloads(config, tmp_path) if p.stem == MODEL]
    objects = list(yaml.safe_load_all(path.read_text()))
    env = _vllm_env(objects)
    assert env["VLLM_SAMPLE"] == "a$$b$c"
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert '--compilation-config={"note":"$$x"}' in expanded_command(container, env)
