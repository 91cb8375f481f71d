"""One model's vLLM workload on the cluster: its identity (read-only on the model's S3 prefix, through Pod
Identity) and its Kubernetes objects, applied by the cluster's kubectl provider from whichever stack holds it."""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.pod_identity import ModelReader
from construct_kit.source import applies_objects, cluster_ref
from model_workload.chart import VllmAutoscaler, VllmModel
from model_workload.pod_spec import SERVICE_ACCOUNT
from warmstart.autoscaling import ScalingPolicy
from warmstart.workload import ModelPlan


class ModelWorkload(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        plan: ModelPlan,
        bucket_name: str,
        scaling: ScalingPolicy | None = None,
        kms_key_arn: str | None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        model = plan.model
        self.reader = ModelReader(
            self,
            "Reader",
            cluster=cluster,
            namespace=model.name,
            service_account=SERVICE_ACCOUNT,
            bucket_name=bucket_name,
            prefix=model.prefix,
            kms_key_arn=kms_key_arn,
        )
        self.chart = VllmModel(cdk8s.App(), model.name, plan=plan, scaling=scaling)
        self.manifest: eks.KubernetesManifest | None = None
        self.autoscaler: eks.KubernetesManifest | None = None
        if not applies_objects(cluster):
            return  # a GitOps tool applies the model's objects (dist/<env>/); its identity is here
        # What Cluster.add_cdk8s_chart does, with this construct as the scope (so the manifest lives in this
        # stack); prune labels as the cluster's other manifests have them.
        self.manifest = eks.KubernetesManifest(
            self, "Manifest", cluster=cluster_ref(cluster), manifest=self.chart.to_json(), prune=True
        )
        # Pods start with their credentials in place and a GPU pool to land on; a new image is on the GPU nodes
        # (or its bounded wait is over) before the Deployment rolls to it.
        self.manifest.node.add_dependency(self.reader.identity.association, *after)
        # Its own manifest: removing autoscaling deletes it (kubectl's prune would leave an HPA behind).
        if scaling is not None:
            chart = VllmAutoscaler(cdk8s.App(), f"{model.name}-autoscaler", scaling=scaling)
            self.autoscaler = eks.KubernetesManifest(
                self, "Autoscaler", cluster=cluster_ref(cluster), manifest=chart.to_json()
            )
            self.autoscaler.node.add_dependency(self.manifest)
