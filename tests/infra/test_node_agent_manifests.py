"""The compile-cache agent as deployed: DaemonSet on GPU nodes, least privilege in Kubernetes and AWS."""

import json

from contracts.agent_settings import AgentSettings
from tests.manifests import of_kind
from tests.synth import ROOT

# What every pod on the GPU nodes tolerates: the GPU taint and warmstart's own (contracts/pod_labels.py).
POOL_TOLERATIONS = [
    {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "warmstart.io/gpu-pool", "operator": "Exists"},
]


def _agent_objects(synthesized) -> list[dict]:
    return [
        m
        for m in synthesized.manifests()
        if m["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "warmstart-agent"
    ]


def test_daemon_set_runs_on_gpu_nodes_with_the_node_cache_mounted(shipped):
    (daemon_set,) = of_kind(_agent_objects(shipped), "DaemonSet")
    pod = daemon_set["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"warmstart.io/gpu-pool": "gpu"}
    assert pod["tolerations"] == POOL_TOLERATIONS
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = {"auto": "/mnt/.ephemeral", "karpenter": "/mnt/k8s-disks/0"}[shipped.config.compute.mode]
    assert volumes["compile-cache"]["hostPath"] == {"path": f"{mount}/compile-cache", "type": "DirectoryOrCreate"}
    # The vLLM pods' entry records (what each pod serves and found), read to judge use and hits.
    assert volumes["pod-records"]["hostPath"] == {"path": f"{mount}/warmstart/pods", "type": "DirectoryOrCreate"}
    assert pod["securityContext"] == {
        "seLinuxOptions": {"level": "s0:c418,c711"},  # the vLLM pods' level
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsUser": 0,
    }
    assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"] == "1Gi"
    # Root is a departure, stated where scanners read it.
    annotations = daemon_set["metadata"]["annotations"]
    assert "host paths" in annotations["ignore-check.kube-linter.io/run-as-non-root"]
    assert annotations["checkov.io/skip1"].startswith("CKV_K8S_23=")
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert ".dkr.ecr." in container["image"]  # the image asset CDK builds and pushes at deploy


def test_settings_describe_every_cached_model_and_roll_the_agents_on_change(shipped):
    objects = _agent_objects(shipped)
    (config_map,) = of_kind(objects, "ConfigMap")
    settings = AgentSettings.model_validate_json(config_map["data"]["agent.json"])
    assert settings.bucket == shipped.config.buckets.compile_cache
    mount = {"auto": "/mnt/.ephemeral", "karpenter": "/mnt/k8s-disks/0"}[shipped.config.compute.mode]
    assert (settings.nvme_mount, settings.weights_host_path) == (mount, f"{mount}/warmstart/weights")
    assert {m.name for m in settings.models} == {m.name for m in shipped.config.models}
    pool = set(shipped.config.compute.gpu_pool.instance_types)
    assert set(settings.gpus) == pool
    (daemon_set,) = of_kind(objects, "DaemonSet")
    assert len(daemon_set["spec"]["template"]["metadata"]["annotations"]["warmstart.io/settings-sha256"]) == 64


def test_rbac_lists_pods_and_events_patches_nodes_and_writes_configmaps_in_its_namespace_only(shipped):
    (role,) = of_kind(_agent_objects(shipped), "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]
    (binding,) = of_kind(_agent_objects(shipped), "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "warmstart-agent", "namespace": "warmstart-system"}
    ]
    (starts,) = of_kind(_agent_objects(shipped), "Role")
    assert starts["metadata"]["namespace"] == "warmstart-system"
    assert starts["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]
    (starts_binding,) = of_kind(_agent_objects(shipped), "RoleBinding")
    assert starts_binding["roleRef"]["name"] == "warmstart-agent-starts"


def test_metrics_port_service_and_scrape_annotations(shipped):
    objects = _agent_objects(shipped)
    port = shipped.config.metrics.port
    (daemon_set,) = of_kind(objects, "DaemonSet")
    template = daemon_set["spec"]["template"]
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
    assert annotations.items() <= template["metadata"]["annotations"].items()
    (container,) = template["spec"]["containers"]
    assert container["ports"] == [{"containerPort": port, "name": "metrics", "protocol": "TCP"}]
    (service,) = [s for s in of_kind(objects, "Service") if s["metadata"]["name"] == "warmstart-agent-metrics"]
    assert (
        service["spec"]["clusterIP"] == "None"
        and service["spec"]["selector"] == daemon_set["spec"]["selector"]["matchLabels"]
    )
    assert service["spec"]["ports"] == [{"name": "metrics", "port": port, "protocol": "TCP", "targetPort": "metrics"}]
    assert "annotations" not in service["metadata"]  # the pods carry them: scraped once, not twice
    # kubelet's pod logs, read-only, where vLLM's lines are read from.
    (logs,) = [v for v in template["spec"]["volumes"] if v["name"] == "pod-logs"]
    assert logs["hostPath"] == {"path": "/var/log/pods", "type": "Directory"}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "pod-logs"]
    assert mount["readOnly"] is True


def test_admission_policy_limits_the_agent_to_its_own_node_and_labels(shipped):
    objects = _agent_objects(shipped)
    policies = {p["metadata"]["name"]: p for p in of_kind(objects, "ValidatingAdmissionPolicy")}
    assert set(policies) == {"warmstart-agent-own-node-only", "warmstart-agent-own-starts-only", "warmstart-host-paths"}
    policy = policies["warmstart-agent-own-node-only"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:warmstart-system:warmstart-agent'"
    )
    expressions = " ".join(v["expression"] for v in spec["validations"])
    assert "authentication.kubernetes.io/node-name" in expressions
    assert "object.spec == oldObject.spec" in expressions
    assert ".contains(" not in expressions  # exact label prefixes (what the rules mean: test_admission_policy.py)
    for field in ("annotations", "finalizers", "ownerReferences"):
        assert f"object.metadata.{field}" in expressions
    assert {v["name"]: v["expression"] for v in spec["variables"]}["ours"] == (
        "['compile-cache.warmstart.io/', 'compile-use.warmstart.io/', 'compile-miss.warmstart.io/', "
        "'weights.warmstart.io/']"
    )
    bindings = sorted(b["spec"]["policyName"] for b in of_kind(objects, "ValidatingAdmissionPolicyBinding"))
    assert bindings == sorted(policies)
    for binding in of_kind(objects, "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["validationActions"] == ["Deny"]
    starts = policies["warmstart-agent-own-starts-only"]["spec"]
    assert starts["failurePolicy"] == "Fail"
    assert starts["matchConstraints"]["resourceRules"][0]["resources"] == ["configmaps"]


def test_agent_aws_access_is_the_compile_cache_prefix_only(shipped):
    template = shipped.template_json("cluster")
    (policy,) = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and k.startswith("NodeAgentCompileCacheAccess")
    ]
    bucket = shipped.config.buckets.compile_cache
    assert policy == [
        {
            "Action": ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"],  # never deletes
            "Effect": "Allow",
            "Resource": f"arn:aws:s3:::{bucket}/compile-cache/*",
            "Sid": "CompileCacheObjects",
        },
        {  # the pruner's report of its last run, read-only (contracts/pruner_report.py)
            "Action": "s3:GetObject",
            "Effect": "Allow",
            "Resource": f"arn:aws:s3:::{bucket}/pruner-last-run.json",
            "Sid": "ReadPrunerReport",
        },
        {
            "Action": "s3:ListBucket",
            # The report's key too: before the pruner's first run its read answers 404, not 403.
            "Condition": {"StringLike": {"s3:prefix": ["compile-cache/*", "pruner-last-run.json"]}},
            "Effect": "Allow",
            "Resource": f"arn:aws:s3:::{bucket}",
            "Sid": "ListCompileCache",
        },
    ]
    shipped.template("cluster").has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "warmstart-system", "ServiceAccount": "warmstart-agent"}
    )


def test_agent_image_is_an_asset_built_at_deploy_from_the_runtimes_it_runs_and_the_contracts_only(shipped):
    assets = json.loads((shipped.outdir / f"{shipped.stacks.cluster.stack_name}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["dockerFile"] == "node_agent/Dockerfile"
    context = shipped.outdir / image["source"]["directory"]
    # No domain package: a new refusal message or default does not rebuild the image.
    assert sorted(p.name for p in context.iterdir()) == ["contracts", "image_preload", "node_agent"]
    assert sorted(p.name for p in (context / "node_agent").iterdir()) == [
        "Dockerfile",  # the build needs it in the context it is sent
        "__init__.py",
        "requirements.txt",
        "runtime",
    ]
    assert sorted(p.name for p in (context / "image_preload" / "runtime").iterdir()) == ["__init__.py", "gate.py"]
    assert sorted(p.name for p in (context / "contracts").iterdir()) == sorted(
        p.name for p in (ROOT / "contracts").glob("*.py")
    )
    assert not list(context.rglob("__pycache__"))


def test_agent_mounts_the_weights_root_only_when_a_model_caches_weights(shipped):
    from warmstart.node_caches import weights_cached

    (daemon_set,) = of_kind(_agent_objects(shipped), "DaemonSet")
    volumes = {v["name"]: v for v in daemon_set["spec"]["template"]["spec"]["volumes"]}
    cached = [m for m in shipped.config.models if weights_cached(m, shipped.config)]
    if cached:
        mount = {"auto": "/mnt/.ephemeral", "karpenter": "/mnt/k8s-disks/0"}[shipped.config.compute.mode]
        assert volumes["weights"]["hostPath"] == {"path": f"{mount}/warmstart/weights", "type": "DirectoryOrCreate"}
    else:
        assert "weights" not in volumes


def test_agent_reads_only_the_prefixes_of_models_it_caches_and_writes_none(shipped):
    from warmstart.node_caches import weights_cached

    template = shipped.template_json("cluster")
    policies = [
        r["Properties"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and k.startswith("NodeAgentReadWeights")
    ]
    cached = [m for m in shipped.config.models if weights_cached(m, shipped.config)]
    assert len(policies) == (1 if cached else 0)  # a few models fit one managed policy
    bucket = shipped.config.buckets.models.name
    for policy in policies:
        statements = policy["PolicyDocument"]["Statement"]
        assert statements[0]["Action"] == "s3:GetObject"
        resources = statements[0]["Resource"]
        assert sorted(resources if isinstance(resources, list) else [resources]) == sorted(
            f"arn:aws:s3:::{bucket}/{m.prefix}*" for m in cached
        )
        assert statements[1]["Condition"] == {"StringLike": {"s3:prefix": [f"{m.prefix}*" for m in cached]}}
        assert "s3:PutObject" not in json.dumps(statements)


def test_weights_read_policies_are_grouped_to_fit_iams_managed_policy_size():
    from warmstart.scale import MANAGED_POLICY_CHARACTERS, prefix_groups

    prefixes = [f"models/organisation-{i:03d}/some-long-model-name-{i:03d}/" for i in range(150)]
    groups = prefix_groups("acme-llm-weights-prod", prefixes)
    assert [p for g in groups for p in g] == prefixes and len(groups) > 1
    for group in groups:
        document = json.dumps([[f"arn:aws:s3:::acme-llm-weights-prod/{p}*" for p in group], [f"{p}*" for p in group]])
        assert len(document.replace(" ", "")) < MANAGED_POLICY_CHARACTERS - 900


def test_the_agent_is_restarted_only_when_its_main_loop_stops_turning(shipped, tmp_path):
    """The probes run the same check on the heartbeat file the main loop touches: fresh passes, older than
    the bound or absent (a restarted agent removes the old one) fails."""
    import os
    import subprocess
    import sys
    import time

    from node_agent.chart import HEARTBEAT_FILE, HEARTBEAT_MAX_AGE_SECONDS

    (daemon_set,) = of_kind(_agent_objects(shipped), "DaemonSet")
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    assert startup["exec"] == liveness["exec"] and startup["timeoutSeconds"] == liveness["timeoutSeconds"] == 10
    assert startup["periodSeconds"] * startup["failureThreshold"] == 1800  # start: every model's restore
    assert {e["name"]: e["value"] for e in container["env"] if "value" in e}["WARMSTART_HEARTBEAT"] == HEARTBEAT_FILE
    beat = tmp_path / "alive"
    command = [
        sys.executable if part == "python" else part.replace(HEARTBEAT_FILE, str(beat))
        for part in liveness["exec"]["command"]
    ]

    def passes() -> bool:
        return subprocess.run(command, capture_output=True).returncode == 0

    assert not passes()  # no beat yet
    beat.touch()
    assert passes()
    stale = time.time() - HEARTBEAT_MAX_AGE_SECONDS - 5
    os.utime(beat, (stale, stale))
    assert not passes()
    # Readiness: start-up done (the agent's ready file) and the loop beating.
    from node_agent.chart import READY_FILE

    ready = tmp_path / "ready"
    readiness = [
        sys.executable if part == "python" else part.replace(HEARTBEAT_FILE, str(beat)).replace(READY_FILE, str(ready))
        for part in container["readinessProbe"]["exec"]["command"]
    ]
    beat.touch()
    assert subprocess.run(readiness).returncode != 0  # still starting: restores not done
    ready.touch()
    assert subprocess.run(readiness).returncode == 0
    os.utime(beat, (stale, stale))
    assert subprocess.run(readiness).returncode != 0
