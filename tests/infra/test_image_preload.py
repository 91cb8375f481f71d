"""Images on GPU nodes before their pods: the rollout gates, the node classes per OS and image_preload, and the
snapshot build (workflow, its IAM, the custom resource and what the node class takes from it)."""

import json

from image_preload.prepull_chart import GATE_SERVICE_ACCOUNT, GATE_START_SECONDS
from tests.manifests import deployed_manifests, of_kind
from tests.synth import ROOT
from warmstart.image_preload import builder_commands, image_set_key, snapshot_images, snapshot_parameter_name
from warmstart.node_os.al2023 import FAST_IMAGE_PULL_NODE_CONFIG
from warmstart.workload import prepull_daemonset_name

PULL_SCRIPT = (ROOT / "image_preload" / "runtime" / "snapshot" / "pull-images.sh").read_text()


def _resources(template: dict, kind: str) -> dict:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _node_class(synthesized) -> dict:
    (node_class,) = of_kind(synthesized.manifests(), "EC2NodeClass")
    return node_class["spec"]


def test_one_gate_job_per_image_waits_for_its_pre_pull_daemon_set(shipped):
    manifests = shipped.manifests()
    jobs = of_kind(manifests, "Job")
    images = {m.image for m in shipped.config.models}
    assert {j["metadata"]["annotations"]["warmstart.io/image"] for j in jobs} == images
    deadline = shipped.config.image_preload.rollout_wait_minutes * 60
    for job in jobs:
        spec = job["spec"]
        assert spec["activeDeadlineSeconds"] == deadline + GATE_START_SECONDS
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == GATE_SERVICE_ACCOUNT
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", "image_preload.runtime.gate"]
        image = job["metadata"]["annotations"]["warmstart.io/image"]
        assert container["args"] == [
            "--namespace=warmstart-system",
            f"--daemon-set={prepull_daemonset_name(image)}",
            f"--deadline-seconds={deadline}",
        ]
        assert ".dkr.ecr." in container["image"]  # the agent image
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (role,) = [r for r in of_kind(manifests, "Role") if r["metadata"]["name"] == GATE_SERVICE_ACCOUNT]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["daemonsets"],
            "verbs": ["get"],
            "resourceNames": sorted(prepull_daemonset_name(i) for i in images),
        }
    ]


def test_each_deployment_rolls_only_after_its_images_gate(shipped):
    template = shipped.template_json("cluster")
    gates = _resources(template, "Custom::AWSCDK-EKS-KubernetesObjectValue")
    assert len(gates) == len({m.image for m in shipped.config.models})
    job_deadline = shipped.config.image_preload.rollout_wait_minutes * 60 + GATE_START_SECONDS
    names = {j["metadata"]["name"] for j in of_kind(deployed_manifests(template), "Job")}
    for gate in gates.values():
        props = gate["Properties"]
        # Any True condition (Complete, or Failed past activeDeadlineSeconds) releases the deploy.
        assert (props["ObjectType"], props["ObjectNamespace"], props["JsonPath"]) == (
            "job",
            "warmstart-system",
            '.status.conditions[?(@.status=="True")].type',
        )
        assert props["ObjectName"] in names
        assert job_deadline < int(props["TimeoutSeconds"]) <= 13 * 60  # inside one kubectl handler invocation
    # Each model's workload (in its own stack, deployed after the cluster stack) waits for its image's gate.
    for model in shipped.config.models:
        after = {d.node.path for d in shipped.stacks.models[model.name].workload.manifest.node.dependencies}
        assert shipped.stacks.cluster.prepull.gates[model.image].node.path in after, model.name


def test_gate_job_name_changes_with_anything_in_the_job(shipped):
    from image_preload.prepull_chart import PrepullChart

    def names(**change) -> dict:
        props = (
            dict(
                images=["vllm/vllm-openai:v0.21.0"],
                pause_image="registry.k8s.io/pause:3.10",
                gate_image="123.dkr.ecr.us-west-2.amazonaws.com/a:1",
                gate_image_revision="r1",
                gate_deadline_seconds=600,
            )
            | change
        )
        return cdk8s_names(PrepullChart, props)

    base = names()
    assert base == names()  # stable
    assert names(images=["vllm/vllm-openai:v0.22.0"]).values() != base.values()
    assert names(gate_image_revision="r2") != base
    assert names(gate_deadline_seconds=300) != base
    assert names(gate_image="${Token[TOKEN.999]}") == names(gate_image="${Token[TOKEN.123]}")  # token numbers
    assert all(len(n) <= 63 and n.startswith("image-gate-") for n in base.values())


def cdk8s_names(chart_class, props) -> dict:
    import cdk8s

    chart = chart_class(cdk8s.App(), "ImageCache", **props)
    return chart.gate_names


def test_al2023_keeps_raid0_and_turns_on_fast_image_pull(prod):
    spec = _node_class(prod)
    assert spec["instanceStorePolicy"] == "RAID0"
    assert spec["userData"] == FAST_IMAGE_PULL_NODE_CONFIG
    assert "FastImagePull: true" in spec["userData"]


def test_snapshot_mode_boots_bottlerocket_from_the_built_snapshot_without_hiding_it(snapshot_env):
    spec = _node_class(snapshot_env)
    # Karpenter's RAID0 would bind /var/lib/containerd onto the array (without copying): not used here.
    assert "instanceStorePolicy" not in spec
    assert "/var/lib/containerd" not in spec["userData"]
    assert '"bind", "--dirs", "/var/lib/kubelet", "/var/log/pods"' in spec["userData"]
    assert "essential = true" in spec["userData"] and 'mode = "always"' in spec["userData"]
    os_volume, data = spec["blockDeviceMappings"]
    assert os_volume["deviceName"] == "/dev/xvda" and os_volume["ebs"]["volumeSize"] == "4Gi"
    assert data["deviceName"] == "/dev/xvdb"
    assert data["ebs"]["snapshotID"] == "snap-0123456789abcdef0"  # the custom resource's GetAtt, stood in
    assert data["ebs"]["volumeSize"] == "150Gi" and data["ebs"]["volumeInitializationRate"] == 300
    assert "encrypted" not in data["ebs"]  # inherited from the snapshot: the builder encrypts its data volume


def test_the_node_class_names_the_snapshot_the_custom_resource_returns(snapshot_env):
    template = snapshot_env.template_json("cluster")
    ((resource_id, resource),) = _resources(template, "Custom::WarmstartImageSnapshot").items()
    assert resource["Properties"]["ImageSetKey"] == image_set_key(snapshot_env.config)
    assert resource["Properties"]["Images"] == snapshot_images(snapshot_env.config)
    node_classes = [
        r
        for r in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
        if "EC2NodeClass" in json.dumps(r["Properties"]["Manifest"])
    ]
    (manifest,) = [json.dumps(r["Properties"]["Manifest"]) for r in node_classes]
    assert json.dumps({"Fn::GetAtt": [resource_id, "SnapshotId"]}) in manifest


def test_snapshot_mode_puts_the_caches_on_bottlerockets_array(snapshot_env):
    manifests = snapshot_env.manifests()
    paths = [
        v["hostPath"]["path"]
        for d in of_kind(manifests, "Deployment")
        for v in d["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    ]
    assert paths and all(p.startswith("/mnt/.ephemeral/") for p in paths)


def _state_machine(template: dict) -> dict:
    (machine,) = [
        r
        for r in _resources(template, "AWS::StepFunctions::StateMachine").values()
        if "Launch" in json.dumps(r["Properties"]["DefinitionString"])
    ]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<ref>" for p in parts)
    return json.loads(text)


def test_the_workflow_builds_stops_snapshots_records_and_always_terminates(snapshot_env):
    definition = _state_machine(snapshot_env.template_json("cluster"))
    states = definition["States"]
    assert definition["StartAt"] == "ResolveAmi"
    assert states["ResolveAmi"]["Parameters"]["Name"] == "/aws/service/bottlerocket/aws-k8s-1.35/x86_64/1.57.0/image_id"
    launch = states["Launch"]["Parameters"]
    assert launch["MetadataOptions"]["HttpTokens"] == "required"
    data = launch["BlockDeviceMappings"][1]
    assert data["DeviceName"] == "/dev/xvdb" and data["Ebs"]["Encrypted"] is True and data["Ebs"]["VolumeSize"] == 150
    assert states["Launch"]["Next"] == "Build"
    (branch,) = states["Build"]["Branches"]
    inner = branch["States"]
    pull = inner["PullImages"]["Parameters"]
    assert pull["DocumentName"] == "AWS-RunShellScript"
    assert pull["Parameters"]["commands"] == builder_commands(snapshot_images(snapshot_env.config), PULL_SCRIPT)
    assert inner["CreateSnapshot"]["Parameters"]["TagSpecifications"][0]["ResourceType"] == "snapshot"
    assert inner["Record"]["Parameters"]["Name"] == snapshot_parameter_name("prod")
    # Success and failure both terminate the builder.
    assert states["Build"]["Next"] == "TerminateBuilder" and states["TerminateBuilder"]["Next"] == "Built"
    (catch,) = states["Build"]["Catch"]
    assert catch["Next"] == "TerminateAfterFailure" and states["TerminateAfterFailure"]["Next"] == "BuildFailed"
    # Choice rules as Step Functions applies them (the first matching rule wins): Success goes on, any other end
    # of the command fails the build (no snapshot of a half-filled volume), a running one polls again, and every
    # wait ends when the build's poll budget is spent.
    pull = inner["PullDone"]
    under, over = {"n": 1}, {"n": 10_000}
    for status, polls, expected in [
        ("Success", under, "StopBuilder"),
        ("Failed", under, "PullFailed"),
        ("TimedOut", under, "PullFailed"),
        ("Cancelled", under, "PullFailed"),
        ("InProgress", under, "PullWait"),
        ("Pending", under, "PullWait"),
        ("InProgress", over, "PullOutOfTime"),
        ("Success", over, "StopBuilder"),
    ]:
        assert choose(pull, {"pullStatus": {"Status": status}, "polls": polls}) == expected, status
    online = inner["OnlineDone"]
    assert choose(online, {"online": {"InstanceInformationList": []}, "polls": under}) == "OnlineWait"
    assert (
        choose(online, {"online": {"InstanceInformationList": [{"PingStatus": "Online"}]}, "polls": under})
        == "PullImages"
    )
    assert choose(online, {"online": {"InstanceInformationList": []}, "polls": over}) == "OnlineOutOfTime"
    snapshot = inner["SnapshotDone"]
    assert choose(snapshot, {"snapshotState": {"State": "completed"}, "polls": under}) == "Record"
    assert choose(snapshot, {"snapshotState": {"State": "error"}, "polls": under}) == "SnapshotFailed"
    assert choose(snapshot, {"snapshotState": {"State": "pending"}, "polls": under}) == "SnapshotWait"
    assert inner["StartPollBudget"]["Result"] == {"n": 0}
    assert inner["PullCount"]["Parameters"] == {"n.$": "States.MathAdd($.polls.n, 1)"}


def _path(document: dict, path: str):
    value = document
    for part in path.removeprefix("$.").replace("[", ".[").split("."):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(value, list) or index >= len(value):
                return _MISSING
            value = value[index]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


_MISSING = object()


def _matches(rule: dict, document: dict) -> bool:
    if "And" in rule:
        return all(_matches(r, document) for r in rule["And"])
    if "Or" in rule:
        return any(_matches(r, document) for r in rule["Or"])
    if "Not" in rule:
        return not _matches(rule["Not"], document)
    value = _path(document, rule["Variable"])
    if "IsPresent" in rule:
        return (value is not _MISSING) == rule["IsPresent"]
    if "StringEquals" in rule:
        return value == rule["StringEquals"]
    if "NumericGreaterThan" in rule:
        return value is not _MISSING and value > rule["NumericGreaterThan"]
    raise AssertionError(f"operator not modelled: {rule}")


def choose(state: dict, document: dict) -> str:
    """The next state of a Choice state (Amazon States Language: rules in order, first match, else Default)."""
    return next((rule["Next"] for rule in state["Choices"] if _matches(rule, document)), state["Default"])


def test_the_workflow_may_only_touch_what_carries_its_tag(snapshot_env):
    template = snapshot_env.template_json("cluster")
    policies = _resources(template, "AWS::IAM::Policy")
    (policy,) = [r for k, r in policies.items() if k.startswith("ImageSnapshotWorkflow")]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    tag = {"aws:ResourceTag/warmstart.io/image-builder": "prod"}
    assert statements["StopAndTerminateOwnBuilder"]["Condition"] == {"StringEquals": tag}
    assert statements["SnapshotOwnDataVolume"]["Condition"] == {"StringEquals": tag}
    assert statements["LaunchTaggedBuilder"]["Condition"] == {
        "StringEquals": {"aws:RequestTag/warmstart.io/image-builder": "prod"}
    }
    assert statements["RunOnOwnBuilderOnly"]["Condition"] == {
        "StringEquals": {"ssm:resourceTag/warmstart.io/image-builder": "prod"}
    }
    assert statements["PassBuilderRole"]["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    # The state machine got its role immutable: no statement beyond these.
    machine_roles = {
        json.dumps(r["Properties"]["RoleArn"])
        for r in _resources(template, "AWS::StepFunctions::StateMachine").values()
    }
    assert any("ImageSnapshotWorkflowRole" in role for role in machine_roles)
    attached = [
        r
        for r in _resources(template, "AWS::IAM::Policy").values()
        if "ImageSnapshotWorkflowRole" in json.dumps(r["Properties"]["Roles"])
    ]
    assert attached == [policy]


def test_the_resource_deletes_only_its_environments_snapshots(snapshot_env):
    template = snapshot_env.template_json("cluster")
    policies = _resources(template, "AWS::IAM::Policy")
    (policy,) = [r for k, r in policies.items() if k.startswith("ImageSnapshotResourceAccess")]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["DeleteOwnSnapshots"]["Condition"] == {
        "StringEquals": {"aws:ResourceTag/warmstart.io/environment": "prod"}
    }
    assert statements["TerminateOwnBuilders"]["Condition"] == {
        "StringEquals": {"aws:ResourceTag/warmstart.io/image-builder": "prod"}
    }


def test_shipped_environments_build_no_snapshot(shipped):
    assert _resources(shipped.template_json("cluster"), "Custom::WarmstartImageSnapshot") == {}
