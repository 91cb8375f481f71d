"""The vLLM workload: pod spec for both compute modes, both delivery paths, strict validation, snapshots."""

import json

import pytest
import yaml

from render import render_workloads
from tests.manifest_validation import validate_manifest
from tests.manifests import of_kind
from tests.synth import SHIPPED_ENVIRONMENTS

PRUNE_LABEL = "aws.cdk.eks/prune-"

# What every pod on the GPU nodes tolerates: the GPU taint and warmstart's own (contracts/pod_labels.py).
POOL_TOLERATIONS = [
    {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "warmstart.io/gpu-pool", "operator": "Exists"},
]


@pytest.fixture(scope="session")
def dist(synthesized_env, tmp_path_factory):
    """dist/<env>/ as `make synth` writes it: {env: {file name: [objects]}}."""
    rendered = {}
    for name in SHIPPED_ENVIRONMENTS:
        outdir = tmp_path_factory.mktemp(f"dist-{name}")
        files = render_workloads(synthesized_env(name).config, outdir)
        rendered[name] = {path.name: list(yaml.safe_load_all(path.read_text())) for path in files}
    return rendered


def _deployments(synthesized) -> dict[str, dict]:
    return {d["metadata"]["namespace"]: d for d in of_kind(synthesized.manifests(), "Deployment")}


def _container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _fingerprint(synthesized, model_name: str) -> str:
    from warmstart.catalog import default_catalog
    from warmstart.workload import plan_model

    (model,) = [m for m in synthesized.config.models if m.name == model_name]
    return plan_model(model, synthesized.config, default_catalog()).factors.fingerprint()


def test_one_workload_per_model(shipped):
    assert set(_deployments(shipped)) == {m.name for m in shipped.config.models}


def test_pod_spec_auto_mode(dev):
    deployment = _deployments(dev)["qwen3-4b"]
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert container["image"] == "vllm/vllm-openai:v0.34.0"
    # The image's own ENTRYPOINT behind the entry step: `vllm serve <model>` (0.34.0 deprecates the module form).
    assert container["command"] == ["python3", "/warmstart-entry/vllm_entry.py", "vllm", "serve"]
    assert container["args"] == [
        "s3://warmstart-dev-models-123456789012/qwen3-4b/",
        "--load-format=runai_streamer",
        '--model-loader-extra-config={"concurrency":3}',
        "--tensor-parallel-size=1",
        "--max-model-len=8192",
        "--dtype=auto",
        "--served-model-name=qwen3-4b",
        "--host=0.0.0.0",
        "--port=8000",
        "--shutdown-timeout=45",  # requests in flight finish when the pod goes (vLLM's default aborts them)
    ]
    assert container["resources"] == {
        "limits": {"memory": "24Gi", "nvidia.com/gpu": 1},
        "requests": {"cpu": "3", "memory": "24Gi", "nvidia.com/gpu": 1},
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    fingerprint = _fingerprint(dev, "qwen3-4b")
    assert volumes["compile-cache"]["hostPath"] == {
        "path": f"/mnt/.ephemeral/compile-cache/qwen3-4b/{fingerprint}",
        "type": "DirectoryOrCreate",
    }
    assert volumes["warmstart-state"]["hostPath"] == {
        "path": "/mnt/.ephemeral/compile-cache/.warmstart",
        "type": "DirectoryOrCreate",
    }
    assert volumes["pod-records"]["hostPath"] == {"path": "/mnt/.ephemeral/warmstart/pods", "type": "DirectoryOrCreate"}
    assert volumes["vllm-assets"]["emptyDir"] == {"sizeLimit": "2Gi"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "dshm": "/dev/shm",
        "compile-cache": "/compile-cache",
        "vllm-assets": "/warmstart-assets",
        "entry": "/warmstart-entry",
        "pod-records": "/warmstart-pods",
    }
    # One MCS level for the whole pod (init containers included) and the agent: Bottlerocket runs SELinux.
    assert pod["securityContext"] == {
        "seLinuxOptions": {"level": "s0:c418,c711"},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False
    # dev's pool leaves room for one more node: the new pod starts before the old one goes.
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert "topologySpreadConstraints" not in pod  # one replica (accepted in dev.yaml): nothing to spread
    assert pod["nodeSelector"] == {"warmstart.io/gpu-pool": "gpu"}
    assert pod["tolerations"] == POOL_TOLERATIONS
    assert pod["serviceAccountName"] == "vllm"


def test_pod_spec_karpenter_tensor_parallel_size(prod):
    deployment = _deployments(prod)["qwen3-6-35b-a3b"]
    container = _container(deployment)
    assert '--model-loader-extra-config={"concurrency":17,"distributed":true}' in container["args"]
    assert "--tensor-parallel-size=2" in container["args"]
    assert container["resources"]["limits"] == {
        "memory": container["resources"]["requests"]["memory"],
        "nvidia.com/gpu": 2,
    }
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 2
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["compile-cache"]["hostPath"]["path"] == (
        f"/mnt/k8s-disks/0/compile-cache/qwen3-6-35b-a3b/{_fingerprint(prod, 'qwen3-6-35b-a3b')}"
    )
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_streamer_and_compile_cache_environment(shipped):
    for deployment in _deployments(shipped).values():
        env = _env(_container(deployment))
        assert env["RUNAI_STREAMER_CHUNK_BYTESIZE"] == "4294967296"
        assert env["RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS"] == "3000"
        assert env["RUNAI_STREAMER_S3_LOW_SPEED_LIMIT"] == "1048576"
        assert env["XDG_CACHE_HOME"] == "/compile-cache/cache"
        assert env["TORCHINDUCTOR_CACHE_DIR"] == "/compile-cache/cache/inductor"
        assert env["TRITON_CACHE_DIR"] == "/compile-cache/cache/triton"
        assert env["VLLM_CACHE_ROOT"] == "/compile-cache/cache/vllm"
        assert env["VLLM_ASSETS_CACHE"] == "/warmstart-assets"
        assert env["AWS_REGION"] == shipped.config.region
        # What the entry step records for the agent: which pod, which configuration.
        assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
        assert env["WARMSTART_POD_RECORDS"] == "/warmstart-pods"
        assert len(env["WARMSTART_FINGERPRINT"]) == 16


def test_probes_follow_the_reference_deployment(shipped):
    from warmstart.catalog import default_catalog
    from warmstart.workload import plan_model

    models = {m.name: m for m in shipped.config.models}
    for namespace, deployment in _deployments(shipped).items():
        container = _container(deployment)
        plan = plan_model(models[namespace], shipped.config, default_catalog())
        # The budget comes from the model (its size, TP, compile): 30 s + threshold x 10 s covers it.
        assert 30 + 10 * plan.startup_failure_threshold >= plan.startup_budget_seconds
        assert container["startupProbe"] == {
            "httpGet": {"path": "/health", "port": "http"},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "failureThreshold": plan.startup_failure_threshold,
        }
        assert container["livenessProbe"] == {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        }
        assert container["readinessProbe"] == {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
        }
        assert container["ports"] == [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]


def test_service_and_disruption_budget_select_the_pods(shipped):
    manifests = shipped.manifests()
    for deployment in of_kind(manifests, "Deployment"):
        namespace = deployment["metadata"]["namespace"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        (service,) = [s for s in of_kind(manifests, "Service") if s["metadata"]["namespace"] == namespace]
        (budget,) = [b for b in of_kind(manifests, "PodDisruptionBudget") if b["metadata"]["namespace"] == namespace]
        assert service["spec"]["selector"] == selector
        assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP", "targetPort": "http"}]
        assert budget["spec"]["selector"]["matchLabels"] == selector
        assert budget["spec"]["maxUnavailable"] == 1


def test_workloads_wait_for_credentials_and_the_gpu_pool(shipped):
    assembly = json.loads((shipped.outdir / "manifest.json").read_text())["artifacts"]
    cluster_stack = shipped.stacks.cluster
    for model in shipped.config.models:
        stack = shipped.stacks.models[model.name]
        template = shipped.model_template_json(model.name)
        (manifest_id,) = [
            k
            for k, r in template["Resources"].items()
            if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "Autoscaler" not in k
        ]
        assert any(
            "IdentityAssociation" in d or "ReaderIdentityAssociation" in d
            for d in template["Resources"][manifest_id]["DependsOn"]
        ), model.name
        # The GPU pool (and the image's rollout gate) live in the cluster stack: the model stack deploys after it.
        assert cluster_stack.stack_name in assembly[stack.artifact_id]["dependencies"]
        after = {d.node.path for d in stack.workload.manifest.node.dependencies}
        assert cluster_stack.compute.gpu_pool.manifest.node.path in after
        if model.autoscaling:  # the autoscaler after the Deployment it scales
            autoscaler = stack.workload.autoscaler
            assert autoscaler is not None and stack.workload.manifest in autoscaler.node.dependencies


def _without_prune_labels(obj: dict) -> dict:
    obj = json.loads(json.dumps(obj))
    labels = obj["metadata"].get("labels", {})
    for key in [k for k in labels if k.startswith(PRUNE_LABEL)]:
        del labels[key]
    return obj


def test_gitops_manifests_equal_what_cdk_deploys(shipped, dist):
    deployed = [
        _without_prune_labels(m)
        for m in shipped.manifests()
        if m["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "vllm"
    ]
    rendered = [obj for objects in dist[shipped.name].values() for obj in objects]
    key = lambda m: (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])  # noqa: E731
    assert sorted(deployed, key=key) == sorted(rendered, key=key)


def test_gitops_manifests_pass_strict_validation(shipped, dist):
    files = dist[shipped.name]
    scaled = {f"{m.name}-autoscaler.yaml" for m in shipped.config.models if m.autoscaling}
    assert set(files) == {f"{m.name}.yaml" for m in shipped.config.models} | scaled
    for model in shipped.config.models:
        objects = files[f"{model.name}.yaml"]
        kinds = [o["kind"] for o in objects]
        expected = ["ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "NetworkPolicy"]
        assert kinds[0] == "Namespace" and sorted(kinds[1:]) == sorted(expected)
        if model.autoscaling:  # its own file (its own manifest on the cdk deploy path)
            objects = objects + files[f"{model.name}-autoscaler.yaml"]  # not +=: the fixture is shared
            assert [o["kind"] for o in files[f"{model.name}-autoscaler.yaml"]] == ["ScaledObject"]
        for obj in objects:
            validate_manifest(obj, shipped.config.cluster.kubernetes_version)


@pytest.mark.parametrize("environment", SHIPPED_ENVIRONMENTS)
def test_dist_snapshot(dist, environment, snapshot):
    assert dist[environment] == snapshot


def test_a_leaving_pod_drains_within_its_grace_period(shipped):
    """preStop: kubelet's sleep while the endpoint goes; then vLLM finishes what runs for --shutdown-timeout; the
    grace period covers both (vLLM 0.21.0: SIGTERM shuts the engine down with that timeout)."""
    for deployment in _deployments(shipped).values():
        pod = deployment["spec"]["template"]["spec"]
        container = _container(deployment)
        assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
        timeout = next(int(a.split("=")[1]) for a in container["args"] if a.startswith("--shutdown-timeout="))
        assert pod["terminationGracePeriodSeconds"] > 10 + timeout


def test_render_replaces_stale_files(tmp_path, dev):
    (tmp_path / "removed-model.yaml").write_text("kind: Deployment\n")
    files = render_workloads(dev.config, tmp_path)
    assert [p.name for p in files] == ["qwen3-4b-autoscaler.yaml", "qwen3-4b.yaml"]


def test_weights_cached_pods_choose_their_source_at_start_and_prefer_warm_nodes(prod):
    deployment = _deployments(prod)["llama-3-3-70b"]
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert container["command"] == ["python3", "/warmstart-entry/vllm_entry.py", "vllm", "serve"]
    assert container["args"][0] == "s3://acme-llm-weights-prod/llama-3.3-70b-instruct/"  # always the S3 URI
    env = _env(container)
    assert env["WARMSTART_WEIGHTS_ROOT"] == "/warmstart-weights"
    assert env["WARMSTART_WEIGHTS_MAX_AGE"] == "90"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["weights"]["hostPath"] == {"path": "/mnt/k8s-disks/0/warmstart/weights", "type": "DirectoryOrCreate"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["weights"] == {"mountPath": "/warmstart-weights", "name": "weights", "readOnly": True}
    affinity = pod["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity  # prefers, never requires
    (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["preference"]["matchExpressions"] == [
        {"key": "weights.warmstart.io/llama-3-3-70b", "operator": "In", "values": ["ready"]}
    ]
    assert len(deployment["spec"]["template"]["metadata"]["annotations"]["warmstart.io/entry-sha256"]) == 64


def test_without_the_weights_cache_pods_have_no_weights_mount(dev):
    deployment = _deployments(dev)["qwen3-4b"]
    container = _container(deployment)
    assert "WARMSTART_WEIGHTS_ROOT" not in _env(container)
    assert "weights" not in {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}


def test_the_entry_config_map_carries_the_entry_step_the_loopback_endpoint_and_the_plugin(shipped, dist):
    from model_workload.pod_spec import ENTRY_FILES, entry_key

    for name, objects in dist[shipped.name].items():
        if name.endswith("-autoscaler.yaml"):
            continue
        (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
        assert config_map["metadata"]["name"] == "warmstart-entry"
        assert config_map["data"] == {entry_key(name): path.read_text() for name, path in ENTRY_FILES.items()}
        for deployment in (o for o in objects if o["kind"] == "Deployment"):
            (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "entry"]
            # Every file at its path below the mount: the plugin's dist-info is a folder beside the scripts.
            assert {i["path"]: i["key"] for i in volume["configMap"]["items"]} == {
                name: entry_key(name) for name in ENTRY_FILES
            }


def test_one_prepull_daemonset_per_distinct_serving_image(shipped):
    from warmstart.workload import prepull_daemonset_name

    manifests = shipped.manifests()
    caches = [d for d in of_kind(manifests, "DaemonSet") if d["metadata"]["name"].startswith("image-cache-")]
    images = {m.image for m in shipped.config.models}
    assert {d["metadata"]["name"] for d in caches} == {prepull_daemonset_name(i) for i in images}
    for cache in caches:
        pod = cache["spec"]["template"]["spec"]
        (pull,) = pod["initContainers"]
        assert pull["image"] in images and pull["command"] == ["/bin/sh", "-c", "exit 0"]
        assert pull["imagePullPolicy"] == "IfNotPresent"
        (hold,) = pod["containers"]
        assert hold["image"] == shipped.config.caches.pause_image
        assert pod["nodeSelector"] == {"warmstart.io/gpu-pool": "gpu"}
        assert pod["tolerations"] == POOL_TOLERATIONS
