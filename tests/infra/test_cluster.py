import json

from image_preload.prepull_chart import GATE_SERVICE_ACCOUNT
from tests.manifests import deployed_manifests, helm_charts, of_kind

ALL_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _cluster_props(synthesized) -> dict:
    template = synthesized.template_json("cluster")
    return next(r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster")["Properties"]


def test_control_plane_logs_everything_and_encrypts_secrets(created):
    props = _cluster_props(created)
    enabled = [t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]]
    assert sorted(enabled) == sorted(ALL_LOG_TYPES)
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert props["Version"] == created.config.cluster.kubernetes_version
    assert props["Name"] == created.config.cluster.name
    created.template("cluster").has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_dev_endpoint_is_public_and_private_limited_to_the_configured_cidrs(dev):
    access = _cluster_props(dev)["ResourcesVpcConfig"]
    assert access["EndpointPrivateAccess"] is True
    assert access["EndpointPublicAccess"] is True
    assert access["PublicAccessCidrs"] == dev.config.cluster.public_access_cidrs


def test_prod_endpoint_is_private(prod):
    access = _cluster_props(prod)["ResourcesVpcConfig"]
    assert access["EndpointPrivateAccess"] is True
    assert access["EndpointPublicAccess"] is False


def test_cluster_runs_in_private_subnets(created):
    subnets = json.dumps(_cluster_props(created)["ResourcesVpcConfig"]["SubnetIds"])
    assert "privateSubnet" in subnets and "publicSubnet" not in subnets


def test_auto_mode_cluster_uses_our_node_role_and_gpu_node_class(dev):
    props = _cluster_props(dev)
    assert props["ComputeConfig"]["Enabled"] is True
    assert props["ComputeConfig"]["NodePools"] == ["system", "general-purpose"]
    assert "AutoModeNodeRole" in json.dumps(props["ComputeConfig"]["NodeRoleArn"])
    assert props["StorageConfig"]["BlockStorage"]["Enabled"] is True
    manifests = dev.manifests()
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
    (node_pool,) = of_kind(shipped.manifests(), "NodePool")
    spec = node_pool["spec"]
    assert spec["template"]["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "warmstart.io/gpu-pool", "value": "gpu", "effect": "NoSchedule"},
    ]
    requirements = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    pool = shipped.config.compute.gpu_pool
    assert requirements["node.kubernetes.io/instance-type"] == pool.instance_types
    assert requirements["karpenter.sh/capacity-type"] == pool.capacity_types
    assert spec["limits"] == {"nvidia.com/gpu": pool.gpu_limit}
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"


def test_every_gpu_workload_selects_a_label_the_pools_nodes_carry(shipped):
    """Karpenter puts a NodePool's `template.metadata.labels` on every node it launches and schedules a pod on the
    pool only if its nodeSelector matches them (Karpenter v1.14 docs, NodePools): each pod that runs on the GPU
    nodes (vLLM, the agent, the image caches) must select only labels of the rendered pool's template."""
    (node_pool,) = of_kind(shipped.manifests(), "NodePool")
    node_labels = node_pool["spec"]["template"]["metadata"]["labels"]
    gpu_pods = [
        obj["spec"]["template"]["spec"]
        for obj in shipped.manifests()
        if obj["kind"] in ("Deployment", "DaemonSet")
        and any(t.get("key") == "nvidia.com/gpu" for t in obj["spec"]["template"]["spec"].get("tolerations", []))
    ]
    assert gpu_pods, "no workload runs on the GPU pool"
    for pod in gpu_pods:
        assert pod.get("nodeSelector") and pod["nodeSelector"].items() <= node_labels.items(), (pod, node_labels)


def test_karpenter_node_class_stripes_instance_store_as_raid0(prod):
    (node_class,) = of_kind(prod.manifests(), "EC2NodeClass")
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
        r
        for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == "karpenter"
    )
    depends = " ".join(karpenter_resource["DependsOn"])
    assert "KarpenterIdentityAssociation" in depends
    gpu_nodes = next(k for k in template["Resources"] if "GpuNodes" in k)
    assert any("Karpenter" in d for d in template["Resources"][gpu_nodes]["DependsOn"])


def test_karpenter_interruption_queue_and_rules(prod):
    template = prod.template("cluster")
    template.has_resource_properties("AWS::SQS::Queue", {"MessageRetentionPeriod": 300, "SqsManagedSseEnabled": True})
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
        assert (
            statements[sid]["Condition"]["StringEquals"]["aws:ResourceTag/kubernetes.io/cluster/warmstart-prod"]
            == "owned"
        )
    assert statements["AllowRegionalReadActions"]["Condition"] == {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}
    assert "KarpenterNodeRole" in json.dumps(statements["AllowPassingInstanceRole"]["Resource"])
    assert statements["AllowPassingInstanceRole"]["Action"] == "iam:PassRole"


def test_every_model_gets_a_pod_identity_without_irsa_annotation(shipped):
    from aws_cdk.assertions import Template

    manifests = shipped.manifests()
    accounts = of_kind(manifests, "ServiceAccount")
    assert {a["metadata"]["namespace"] for a in accounts} == {m.name for m in shipped.config.models} | {
        "warmstart-system"
    }
    templates = {"warmstart-system": shipped.template("cluster")}
    templates |= {m.name: Template.from_json(shipped.model_template_json(m.name)) for m in shipped.config.models}
    for account in accounts:
        assert "eks.amazonaws.com/role-arn" not in json.dumps(account)
        template = templates[account["metadata"]["namespace"]]
        if account["metadata"]["name"] == GATE_SERVICE_ACCOUNT:  # reads DaemonSet status only: no AWS identity
            associations = template.find_resources(
                "AWS::EKS::PodIdentityAssociation", {"Properties": {"ServiceAccount": GATE_SERVICE_ACCOUNT}}
            )
            assert associations == {}
            continue
        template.has_resource_properties(
            "AWS::EKS::PodIdentityAssociation",
            {"Namespace": account["metadata"]["namespace"], "ServiceAccount": account["metadata"]["name"]},
        )
    for model in shipped.config.models:
        templates[model.name].has_resource_properties(
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
    assert "eks.amazonaws.com/role-arn" not in json.dumps([p.read_text() for p in shipped.template_paths()])


def test_model_readers_get_read_only_access_to_their_own_prefix(shipped):
    from aws_cdk.assertions import Template

    bucket = shipped.config.buckets.models.name
    for model in shipped.config.models:
        template = Template.from_json(shipped.model_template_json(model.name))
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
        r
        for m in shipped.config.models
        for k, r in shipped.model_template_json(m.name)["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and "ReadModel" in k
    ]
    assert len(readers) == len(shipped.config.models)


def test_admin_roles_get_cluster_admin_access_entries(prod):
    template = prod.template_json("cluster")
    entries = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::AccessEntry"
        and r["Properties"]["PrincipalArn"] in prod.config.cluster.admin_role_arns
    ]
    assert len(entries) == len(prod.config.cluster.admin_role_arns)
    for entry in entries:
        (policy,) = entry["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


# Issue 10: what AWS, EKS and Karpenter do with these on a first deploy.


def _resources(synthesized, kind: str) -> dict[str, dict]:
    return {k: r for k, r in synthesized.template_json("cluster")["Resources"].items() if r["Type"] == kind}


def test_auto_mode_cluster_role_may_put_the_node_class_tags_on_what_it_launches(dev):
    """Defect 1: the Auto Mode managed policies allow only EKS's own tag keys; the NodeClass carries the
    environment's tags, so the cluster role needs the custom-tags statements of the EKS user guide."""
    (node_class,) = of_kind(dev.manifests(), "NodeClass")
    assert node_class["spec"]["tags"] == dev.config.tags != {}
    policies = {
        k: r for k, r in _resources(dev, "AWS::IAM::Policy").items() if k.startswith("GpuComputeAutoModeCustomTags")
    }
    ((policy_id, policy),) = policies.items()
    (cluster_role,) = [
        k
        for k, r in _resources(dev, "AWS::IAM::Role").items()
        if "eks.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"]) and "ControlPlane" in k
    ]
    assert policy["Properties"]["Roles"] == [{"Ref": cluster_role}]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"Compute", "Storage", "Networking", "RetagThisClustersResources"}
    retag = statements.pop("RetagThisClustersResources")  # a changed `tags` setting updates running resources
    assert retag["Action"] == ["ec2:CreateTags", "ec2:DeleteTags"]
    assert retag["Condition"] == {
        "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "${aws:PrincipalTag/eks:eks-cluster-name}"}
    }
    assert statements["Compute"]["Action"] == ["ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:RunInstances"]
    assert statements["Storage"]["Action"] == ["ec2:CreateSnapshot", "ec2:CreateVolume"]
    assert statements["Networking"]["Action"] == "ec2:CreateNetworkInterface"
    for statement in statements.values():  # still only for this cluster's own resources
        assert statement["Condition"]["StringEquals"] == {
            "aws:RequestTag/eks:eks-cluster-name": "${aws:PrincipalTag/eks:eks-cluster-name}"
        }
    # The pool launches only once the permission is there.
    (gpu_nodes,) = [
        r for k, r in dev.template_json("cluster")["Resources"].items() if k.startswith("ControlPlaneClusterGpuNodes")
    ]
    assert policy_id in gpu_nodes["DependsOn"]


def test_auto_mode_without_tags_adds_no_tagging_permission(dev):
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from stacks.compose import compose_environment
    from tests.synth import cdk_context

    stacks = compose_environment(App(context=cdk_context()), dev.config.model_copy(update={"tags": {}}))
    resources = Template.from_stack(stacks.cluster).to_json()["Resources"]
    assert not [k for k in resources if k.startswith("GpuComputeAutoModeCustomTags")]
    (node_class,) = of_kind(deployed_manifests({"Resources": resources}), "NodeClass")
    assert node_class["spec"]["tags"] == {}


def test_network_policies_are_enforced_in_either_mode(shipped):
    manifests = shipped.manifests()
    addons = {r["Properties"]["AddonName"]: r["Properties"] for r in _resources(shipped, "AWS::EKS::Addon").values()}
    if shipped.config.compute.mode == "auto":
        # EKS user guide, "Use Network Policies with EKS Auto Mode": the ConfigMap, and the NodeClass setting.
        (config_map,) = [m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"] == "amazon-vpc-cni"]
        assert config_map["metadata"]["namespace"] == "kube-system"
        (applied,) = [
            r
            for r in _resources(shipped, "Custom::AWSCDK-EKS-KubernetesResource").values()
            if "amazon-vpc-cni" in json.dumps(r["Properties"]["Manifest"])
        ]
        assert applied["Properties"]["Overwrite"] is True  # applied over one that may exist, not created
        assert config_map["data"] == {"enable-network-policy-controller": "true"}
        (node_class,) = of_kind(manifests, "NodeClass")
        assert node_class["spec"]["networkPolicy"] == "DefaultAllow"
        assert "vpc-cni" not in addons  # Auto Mode runs its own networking
    elif shipped.config.cluster.owned:
        # EKS user guide, "Restrict Pod network traffic with Kubernetes network policies": the VPC CNI add-on.
        assert json.loads(addons["vpc-cni"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
        assert addons["vpc-cni"]["ResolveConflicts"] == "OVERWRITE"
        assert not [m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"] == "amazon-vpc-cni"]
    else:
        # An existing cluster's VPC CNI add-on keeps its owner's settings (an add-on update replaces them all):
        # make preflight checks that it enforces NetworkPolicy, and says how to turn it on.
        assert "vpc-cni" not in addons
        assert not [m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"] == "amazon-vpc-cni"]


def test_karpenter_crds_come_from_their_own_chart_before_the_controller(prod):
    """Defect 9: Helm never upgrades a chart's crds/; the karpenter-crd chart does, at the same version."""
    charts = {r["Properties"]["Release"]: (k, r) for k, r in _resources(prod, "Custom::AWSCDK-EKS-HelmChart").items()}
    crd_id, crds = charts["karpenter-crd"]
    _, controller = charts["karpenter"]
    assert crds["Properties"]["Repository"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert crds["Properties"]["Version"] == controller["Properties"]["Version"] == prod.config.compute.karpenter_version
    assert crds["Properties"]["Namespace"] == "kube-system"
    assert controller["Properties"]["SkipCrds"] is True
    assert crd_id in controller["DependsOn"]
    # Leaving Karpenter for Auto Mode must not uninstall the CRDs both share (docs/upstream-facts.md).
    assert crds.get("DeletionPolicy") == "Retain" and crds.get("UpdateReplacePolicy") == "Retain"
    assert controller.get("DeletionPolicy", "Delete") == "Delete"


def test_pod_identity_roles_trust_only_their_cluster_namespace_and_service_account(created):
    """Defect 8: the session tags Pod Identity sets (EKS user guide, "Pod Identity ... session tags")."""
    (cluster_id,) = _resources(created, "AWS::EKS::Cluster")
    roles = {
        k: r["Properties"]
        for k, r in _resources(created, "AWS::IAM::Role").items()
        if "pods.eks.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    }
    associations = [r["Properties"] for r in _resources(created, "AWS::EKS::PodIdentityAssociation").values()]
    assert len(roles) == len(associations)
    for association in associations:
        role = roles[association["RoleArn"]["Fn::GetAtt"][0]]
        (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
        assert statement["Condition"] == {
            "StringEquals": {
                "aws:RequestTag/eks-cluster-arn": {"Fn::GetAtt": [cluster_id, "Arn"]},
                "aws:RequestTag/kubernetes-namespace": association["Namespace"],
                "aws:RequestTag/kubernetes-service-account": association["ServiceAccount"],
            }
        }
    for model in created.config.models:  # the models' roles, in their own stacks, trust the same way
        resources = created.model_template_json(model.name)["Resources"]
        (role,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::IAM::Role"]
        (association,) = [
            r["Properties"] for r in resources.values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"
        ]
        (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
        condition = statement["Condition"]["StringEquals"]
        # The cluster stack's cluster ARN, read from its outputs (cross-stack reference).
        assert condition["aws:RequestTag/eks-cluster-arn"]["Fn::GetStackOutput"]["StackName"] == (
            created.stacks.cluster.stack_name
        )
        assert (condition["aws:RequestTag/kubernetes-namespace"], association["Namespace"]) == (model.name, model.name)
        assert condition["aws:RequestTag/kubernetes-service-account"] == association["ServiceAccount"]


def test_reserved_capacity_launches_into_the_selected_reservations(prod):
    """Defect 3: Karpenter uses only reservations its EC2NodeClass selects."""
    (node_class,) = of_kind(prod.manifests(), "EC2NodeClass")
    assert "reserved" in prod.config.compute.gpu_pool.capacity_types
    assert node_class["spec"]["capacityReservationSelectorTerms"] == [{"tags": {"warmstart.io/pool": "prod-gpu"}}]


def test_node_replacement_takes_one_node_at_a_time_within_a_bounded_grace(shipped):
    """Defect 4: expiry is forceful (no replacement first, budgets do not hold it back; PDBs do, for at most
    the termination grace period), so replicas run on separate nodes and voluntary disruption goes one node
    at a time (Karpenter v1.14 docs, concepts/disruption)."""
    (node_pool,) = of_kind(shipped.manifests(), "NodePool")
    spec, pool = node_pool["spec"], shipped.config.compute.gpu_pool
    assert spec["template"]["spec"]["expireAfter"] == pool.expire_after == "336h"
    assert spec["template"]["spec"]["terminationGracePeriod"] == pool.termination_grace_period == "24h"
    assert spec["disruption"]["budgets"] == [{"nodes": "1"}]
    least = {m.name: m.least_replicas for m in shipped.config.models}
    for deployment in of_kind(shipped.manifests(), "Deployment"):
        replicas = deployment["spec"].get("replicas", least[deployment["metadata"]["namespace"]])  # autoscaled
        pod = deployment["spec"]["template"]["spec"]
        spread = pod.get("topologySpreadConstraints", [])
        if replicas > 1:
            # Separate nodes by required anti-affinity (a hostname spread lets replicas share the only node);
            # zones by a preference.
            (apart,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert apart["topologyKey"] == "kubernetes.io/hostname"
            assert apart["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
            assert {c["topologyKey"]: c["whenUnsatisfiable"] for c in spread} == {
                "topology.kubernetes.io/zone": "ScheduleAnyway"
            }
            assert all(
                c["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"] for c in spread
            )
        else:
            (model,) = [m for m in shipped.config.models if m.name == deployment["metadata"]["namespace"]]
            assert model.allow_single_replica_downtime  # accepted explicitly, or refused at synth
