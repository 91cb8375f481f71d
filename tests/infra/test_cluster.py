import json

from tests.manifests import deployed_manifests, helm_charts, of_kind

ALL_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _cluster_props(synthesized) -> dict:
    template = synthesized.template_json("cluster")
    return next(r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster")["Properties"]


def test_control_plane_logs_everything_and_encrypts_secrets(shipped):
    props = _cluster_props(shipped)
    enabled = [t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]]
    assert sorted(enabled) == sorted(ALL_LOG_TYPES)
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert props["Version"] == shipped.config.cluster.kubernetes_version
    assert props["Name"] == shipped.config.cluster.name
    shipped.template("cluster").has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_dev_endpoint_is_public_and_private_limited_to_the_configured_cidrs(dev):
    access = _cluster_props(dev)["ResourcesVpcConfig"]
    assert access["EndpointPrivateAccess"] is True
    assert access["EndpointPublicAccess"] is True
    assert access["PublicAccessCidrs"] == dev.config.cluster.public_access_cidrs


def test_prod_endpoint_is_private(prod):
    access = _cluster_props(prod)["ResourcesVpcConfig"]
    assert access["EndpointPrivateAccess"] is True
    assert access["EndpointPublicAccess"] is False


def test_cluster_runs_in_private_subnets(shipped):
    subnets = json.dumps(_cluster_props(shipped)["ResourcesVpcConfig"]["SubnetIds"])
    assert "privateSubnet" in subnets and "publicSubnet" not in subnets


def test_auto_mode_cluster_uses_our_node_role_and_gpu_node_class(dev):
    props = _cluster_props(dev)
    assert props["ComputeConfig"]["Enabled"] is True
    assert props["ComputeConfig"]["NodePools"] == ["system", "general-purpose"]
    assert "AutoModeNodeRole" in json.dumps(props["ComputeConfig"]["NodeRoleArn"])
    assert props["StorageConfig"]["BlockStorage"]["Enabled"] is True
    manifests = deployed_manifests(dev.template_json("cluster"))
    (node_class,) = of_kind(manifests, "NodeClass")
    assert node_class["apiVersion"] == "eks.amazonaws.com/v1"
    assert node_class["spec"]["ephemeralStorage"]["size"] == f"{dev.config.compute.ephemeral_storage_gib}Gi"
    (node_pool,) = of_kind(manifests, "NodePool")
    assert node_pool["spec"]["template"]["spec"]["nodeClassRef"] == {
        "group": "eks.amazonaws.com",
        "kind": "NodeClass",
        "name": node_class["metadata"]["name"],
    }


def test_gpu_node_pool_is_tainted_and_limited_to_the_configured_types(shipped):
    (node_pool,) = of_kind(deployed_manifests(shipped.template_json("cluster")), "NodePool")
    spec = node_pool["spec"]
    assert spec["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    requirements = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    pool = shipped.config.compute.gpu_pool
    assert requirements["node.kubernetes.io/instance-type"] == pool.instance_types
    assert requirements["karpenter.sh/capacity-type"] == pool.capacity_types
    assert spec["limits"] == {"nvidia.com/gpu": pool.gpu_limit}
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"


def test_karpenter_node_class_stripes_instance_store_as_raid0(prod):
    (node_class,) = of_kind(deployed_manifests(prod.template_json("cluster")), "EC2NodeClass")
    spec = node_class["spec"]
    assert spec["instanceStorePolicy"] == "RAID0"
    assert spec["amiSelectorTerms"] == [{"alias": prod.config.compute.ami_alias}]
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["blockDeviceMappings"][0]["ebs"]["encrypted"] is True
    assert len(spec["subnetSelectorTerms"]) == len(prod.config.network.availability_zones)


def test_karpenter_mode_installs_pinned_charts_after_its_identity(prod):
    template = prod.template_json("cluster")
    charts = helm_charts(template)
    karpenter = charts["karpenter"]
    assert karpenter["Version"] == prod.config.compute.karpenter_version
    assert karpenter["Repository"] == "oci://public.ecr.aws/karpenter/karpenter"
    assert karpenter["Namespace"] == "kube-system"
    assert "warmstart-prod" in json.dumps(karpenter["Values"])
    assert charts["nvidia-device-plugin"]["Version"] == prod.config.compute.nvidia_device_plugin_version
    karpenter_resource = next(
        r for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == "karpenter"
    )
    depends = " ".join(karpenter_resource["DependsOn"])
    assert "KarpenterIdentityAssociation" in depends
    gpu_nodes = next(k for k in template["Resources"] if "GpuNodes" in k)
    assert any("Karpenter" in d for d in template["Resources"][gpu_nodes]["DependsOn"])


def test_karpenter_interruption_queue_and_rules(prod):
    template = prod.template("cluster")
    template.has_resource_properties(
        "AWS::SQS::Queue", {"MessageRetentionPeriod": 300, "SqsManagedSseEnabled": True}
    )
    template.resource_count_is("AWS::Events::Rule", 5)
    for detail in (
        "AWS Health Event",
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ):
        template.has_resource_properties("AWS::Events::Rule", {"EventPattern": {"detail-type": [detail]}})


def test_karpenter_nodes_can_join_and_controller_uses_pod_identity(prod):
    template = prod.template("cluster")
    template.has_resource_properties("AWS::EKS::AccessEntry", {"Type": "EC2_LINUX"})
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "kube-system", "ServiceAccount": "karpenter"}
    )
    template.has_resource_properties("AWS::EKS::Addon", {"AddonName": "eks-pod-identity-agent"})
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {"AmiType": "AL2023_x86_64_STANDARD", "ScalingConfig": {"MinSize": 2, "MaxSize": 4, "DesiredSize": 2}},
    )


def test_karpenter_writes_are_scoped_to_this_clusters_tags(prod):
    template = prod.template_json("cluster")
    documents = [
        r["Properties"]["PolicyDocument"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
    ]
    statements = {s["Sid"]: s for d in documents for s in d["Statement"]}
    for sid in ("AllowScopedEC2LaunchTemplateAccessActions", "AllowScopedDeletion", "AllowScopedResourceTagging"):
        assert statements[sid]["Condition"]["StringEquals"][
            "aws:ResourceTag/kubernetes.io/cluster/warmstart-prod"
        ] == "owned"
    assert statements["AllowRegionalReadActions"]["Condition"] == {
        "StringEquals": {"aws:RequestedRegion": "us-east-1"}
    }
    assert "KarpenterNodeRole" in json.dumps(statements["AllowPassingInstanceRole"]["Resource"])
    assert statements["AllowPassingInstanceRole"]["Action"] == "iam:PassRole"


def test_every_model_gets_a_pod_identity_without_irsa_annotation(shipped):
    template = shipped.template("cluster")
    manifests = deployed_manifests(shipped.template_json("cluster"))
    accounts = of_kind(manifests, "ServiceAccount")
    assert {a["metadata"]["namespace"] for a in accounts} == {m.name for m in shipped.config.models} | {
        "warmstart-system"
    }
    for account in accounts:
        assert "eks.amazonaws.com/role-arn" not in json.dumps(account)
        template.has_resource_properties(
            "AWS::EKS::PodIdentityAssociation",
            {"Namespace": account["metadata"]["namespace"], "ServiceAccount": account["metadata"]["name"]},
        )
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ]
            }
        },
    )
    assert "eks.amazonaws.com/role-arn" not in json.dumps(shipped.template_json("cluster"))


def test_model_readers_get_read_only_access_to_their_own_prefix(shipped):
    template = shipped.template("cluster")
    bucket = shipped.config.buckets.models.name
    for model in shipped.config.models:
        template.has_resource_properties(
            "AWS::IAM::Policy",
            {
                "PolicyDocument": {
                    "Statement": [
                        {
                            "Action": "s3:GetObject",
                            "Effect": "Allow",
                            "Resource": f"arn:aws:s3:::{bucket}/{model.prefix}*",
                            "Sid": "ReadModelObjects",
                        },
                        {
                            "Action": "s3:ListBucket",
                            "Condition": {"StringLike": {"s3:prefix": [f"{model.prefix}*"]}},
                            "Effect": "Allow",
                            "Resource": f"arn:aws:s3:::{bucket}",
                            "Sid": "ListModelPrefix",
                        },
                    ]
                }
            },
        )
    readers = [
        r for k, r in shipped.template_json("cluster")["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and "ReadModel" in k
    ]
    assert len(readers) == len(shipped.config.models)
    for write in ('"s3:PutObject"', '"s3:DeleteObject"', '"s3:*"'):
        assert write not in json.dumps(readers)


def test_admin_roles_get_cluster_admin_access_entries(prod):
    template = prod.template_json("cluster")
    entries = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"]["PrincipalArn"] in prod.config.cluster.admin_role_arns
    ]
    assert len(entries) == len(prod.config.cluster.admin_role_arns)
    for entry in entries:
        (policy,) = entry["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])
