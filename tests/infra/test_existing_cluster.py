"""warmstart added to a cluster and VPC it did not create: the stacks create neither, reach the cluster through an
access entry of their own (or not at all, with GitOps), and put on it exactly what the config says is missing."""

from __future__ import annotations

import json

import yaml

from render import KUSTOMIZATION, render_workloads, write_kustomization
from tests.manifests import of_kind

# What only a created VPC or cluster has.
CREATED_ONLY = {
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::NatGateway",
    "AWS::EC2::InternetGateway",
    "AWS::EC2::RouteTable",
    "AWS::EC2::FlowLog",
    "AWS::EKS::Cluster",
    "AWS::EKS::Nodegroup",
}
KUBERNETES_RESOURCES = (
    "Custom::AWSCDK-EKS-KubernetesResource",
    "Custom::AWSCDK-EKS-HelmChart",
    "Custom::AWSCDK-EKS-KubernetesObjectValue",
    "Custom::AWSCDK-EKS-KubernetesPatch",
)


def _all_resources(env) -> dict[str, dict]:
    return {
        f"{path.stem}/{key}": resource
        for path in env.template_paths()
        for key, resource in json.loads(path.read_text())["Resources"].items()
    }


def _of_type(env, *types: str) -> dict[str, dict]:
    return {key: r for key, r in _all_resources(env).items() if r["Type"] in types}


def test_no_vpc_and_no_cluster_is_created(existing):
    created = {r["Type"] for r in _all_resources(existing).values()} & CREATED_ONLY
    assert created == set()
    # Nor the created cluster's secrets key or its Auto Mode node role.
    assert not [k for k in _all_resources(existing) if "SecretsKey" in k or "AutoModeNodeRole" in k]


def test_the_s3_gateway_endpoint_is_added_to_the_listed_route_tables_or_left_to_the_one_there(existing):
    network = existing.config.network.existing
    endpoints = [r["Properties"] for r in _of_type(existing, "AWS::EC2::VPCEndpoint").values()]
    if network.s3_gateway_endpoint == "add":
        (endpoint,) = endpoints
        assert endpoint["VpcEndpointType"] == "Gateway" and endpoint["VpcId"] == network.vpc_id
        assert sorted(endpoint["RouteTableIds"]) == network.route_table_ids
        # The cluster stack (GPU nodes, their pulls) is deployed after it.
        assert existing.stacks.network in existing.stacks.cluster.dependencies
    else:
        assert endpoints == [] and existing.stacks.network is None


def test_kubectl_reaches_the_cluster_through_its_own_admin_access_entry_which_every_object_waits_for(existing):
    cluster = existing.template_json("cluster")["Resources"]
    entries = {k: r["Properties"] for k, r in cluster.items() if r["Type"] == "AWS::EKS::AccessEntry"}
    objects = {k: r for k, r in cluster.items() if r["Type"] in KUBERNETES_RESOURCES}
    if not existing.config.cluster.applies_kubernetes_objects:
        assert entries == {} and objects == {}
        assert not [r for r in _all_resources(existing).values() if r["Type"] in KUBERNETES_RESOURCES]
        assert not [k for k, r in cluster.items() if r["Type"] == "AWS::Lambda::Function"]
        return
    (entry_id,) = [k for k, p in entries.items() if "KubectlProviderHandler" in json.dumps(p["PrincipalArn"])]
    entry = entries[entry_id]
    assert entry["ClusterName"] == existing.config.cluster.name
    assert [p["AccessScope"] for p in entry["AccessPolicies"]] == [{"Type": "cluster"}]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])
    assert objects and all(entry_id in r.get("DependsOn", []) for r in objects.values())
    (handler,) = [
        r["Properties"]
        for k, r in cluster.items()
        if r["Type"] == "AWS::Lambda::Function" and k.startswith("ControlPlaneKubectlProviderHandler")
    ]
    if existing.config.cluster.endpoint_access == "private":
        assert handler["VpcConfig"] == {
            "SecurityGroupIds": [existing.config.cluster.existing.security_group_id],
            "SubnetIds": [s.id for s in existing.config.network.existing.private_subnets],
        }
    else:
        assert "VpcConfig" not in handler


def test_the_gpu_nodes_join_with_the_existing_roles_subnets_and_security_group(existing):
    config = existing.config
    manifests = existing.manifests()
    (node_class,) = of_kind(manifests, "EC2NodeClass") or of_kind(manifests, "NodeClass")
    compute = config.compute
    role = compute.node_role_name if config.compute.mode == "auto" else compute.existing_controller.node_role_name
    assert node_class["spec"]["role"] == role
    ids = [s.id for s in config.network.existing.private_subnets]
    groups = [config.cluster.existing.security_group_id, *config.cluster.existing.node_security_group_ids]
    # Both node class kinds take the same placement fields (Auto Mode's NodeClass, Karpenter's EC2NodeClass).
    assert node_class["spec"]["subnetSelectorTerms"] == [{"id": i} for i in ids]
    assert node_class["spec"]["securityGroupSelectorTerms"] == [{"id": g} for g in groups]
    # Its cluster-wide names carry warmstart's: a team's own `gpu` node class or pool is never taken over.
    (node_pool,) = of_kind(manifests, "NodePool")
    assert node_class["metadata"]["name"] == "warmstart-gpu"
    assert node_pool["metadata"]["name"] == f"warmstart-gpu-{config.compute.mode}"
    assert node_pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "warmstart-gpu"


def test_destroying_warmstart_leaves_an_existing_auto_mode_clusters_network_policy_switch(synthesized_env):
    env = synthesized_env("existing-auto-mode")
    (switch,) = [
        r
        for r in _of_type(env, "Custom::AWSCDK-EKS-KubernetesResource").values()
        if "amazon-vpc-cni" in json.dumps(r["Properties"]["Manifest"])
    ]
    assert switch["DeletionPolicy"] == "Retain" and switch["UpdateReplacePolicy"] == "Retain"


def test_only_the_add_ons_and_controller_the_config_says_are_missing_are_installed(existing):
    config = existing.config
    addons = [r["Properties"]["AddonName"] for r in _of_type(existing, "AWS::EKS::Addon").values()]
    releases = [r["Properties"]["Release"] for r in _of_type(existing, "Custom::AWSCDK-EKS-HelmChart").values()]
    assert "vpc-cni" not in addons  # the owner's add-on settings are never replaced
    assert not [k for k in _all_resources(existing) if "InterruptionQueue" in k]  # no Karpenter of ours
    assert not [r for r in releases if r.startswith("karpenter")]
    if config.compute.mode == "auto":
        assert addons == [] and releases == []
        return
    assert ("eks-pod-identity-agent" in addons) == (config.cluster.existing.pod_identity_agent == "add")
    assert ("nvdp" in releases or "nvidia-device-plugin" in releases) == (
        config.cluster.existing.nvidia_device_plugin == "add"
    )


def test_auto_mode_tags_need_the_existing_cluster_role_to_carry_the_custom_tag_policy(synthesized_env):
    env = synthesized_env("existing-auto-mode")
    (policy,) = [r["Properties"] for k, r in _of_type(env, "AWS::IAM::Policy").items() if "AutoModeCustomTags" in k]
    assert policy["Roles"] == [env.config.compute.cluster_role_name]


def test_pod_identity_roles_trust_the_existing_clusters_arn(existing):
    arn = f"arn:aws:eks:{existing.config.region}:{existing.config.account}:cluster/{existing.config.cluster.name}"
    roles = [
        r["Properties"]
        for r in _of_type(existing, "AWS::IAM::Role").values()
        if "pods.eks.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert len(roles) == 1 + len(existing.config.models)  # the agent and each model
    for role in roles:
        (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Condition"]["StringEquals"]["aws:RequestTag/eks-cluster-arn"] == arn
    associations = [r["Properties"] for r in _of_type(existing, "AWS::EKS::PodIdentityAssociation").values()]
    assert {a["ClusterName"] for a in associations} == {existing.config.cluster.name}


def test_gitops_renders_every_object_cdk_would_have_applied_with_a_kustomization(synthesized_env, tmp_path):
    gitops = synthesized_env("existing-gitops")
    same_cluster = synthesized_env("existing")  # the same config with kubernetes_objects: cdk
    files = render_workloads(gitops.config, tmp_path)
    kustomization = yaml.safe_load(write_kustomization(tmp_path, files).read_text())
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["resources"] == [f.name for f in files]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kustomization["resources"], KUSTOMIZATION])
    rendered = [o for f in files for o in yaml.safe_load_all(f.read_text()) if o]
    assert "Token[" not in json.dumps(rendered)  # nothing left for CloudFormation to resolve

    def identities(objects):
        return sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects)

    # The prepull gate Jobs are named from the agent image, prebuilt here and built at deploy there.
    applied = [o for o in same_cluster.applied_manifests() if o["kind"] != "Job"]
    assert identities([o for o in rendered if o["kind"] != "Job"]) == identities(applied)
    assert len(of_kind(rendered, "Job")) == len(of_kind(same_cluster.applied_manifests(), "Job"))
