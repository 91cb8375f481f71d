"""Container image prepull DaemonSets (one per distinct serving image) on the GPU pool, and the rollout gates
that `cdk deploy` waits for before it rolls a Deployment to a new image."""

from __future__ import annotations

import cdk8s
from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.source import applies_objects, cluster_ref
from contracts.agent_settings import AGENT_NAMESPACE
from image_preload.prepull_chart import GATE_START_SECONDS, PrepullChart
from node_agent.image import AgentImage

# The kubectl provider's handler runs for at most 15 minutes (aws-cdk-lib 2.275 aws-eks-v2 KubectlProvider), and
# KubernetesObjectValue polls inside one invocation (after `aws eks update-kubeconfig`): its wait ends by 13.
KUBECTL_WAIT_LIMIT_SECONDS = 13 * 60
# A Job that finished either way has a condition with status True: Complete (or SuccessCriteriaMet) when the gate
# exited, Failed (or FailureTarget) when it could not run or passed activeDeadlineSeconds. Any of them releases
# the deploy; `.status.succeeded` alone would hold a failed Job's deploy until the wait times out and fails it.
FINISHED = '.status.conditions[?(@.status=="True")].type'


class PrepullDaemonSets(Construct):
    """Exposes `gates`: per serving image, the value a Deployment of that image must depend on."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        charts: cdk8s.App,
        images: list[str],
        pause_image: str,
        gate_image: AgentImage,
        rollout_wait_seconds: int,
    ) -> None:
        super().__init__(scope, id)
        wait = rollout_wait_seconds + GATE_START_SECONDS + 60  # the Job's deadline, and a minute for its status
        if wait > KUBECTL_WAIT_LIMIT_SECONDS:
            raise ValueError(f"a {rollout_wait_seconds} s rollout wait does not fit the kubectl handler's 15 minutes")
        self.chart = PrepullChart(
            charts,
            "ImageCache",
            images=images,
            pause_image=pause_image,
            gate_image=gate_image.uri,
            gate_image_revision=gate_image.revision,
            gate_deadline_seconds=rollout_wait_seconds,
        )
        self.gates: dict[str, eks.KubernetesObjectValue] = {}
        self.manifest: eks.KubernetesManifest | None = None
        if not applies_objects(cluster):
            return  # a GitOps tool applies the chart (dist/<env>/); the gate Jobs run, and nothing waits on them
        self.manifest = cluster.add_cdk8s_chart("ImageCache", self.chart)
        for index, image in enumerate(sorted(self.chart.gate_names)):
            gate = eks.KubernetesObjectValue(
                self,
                f"Gate{index}",
                cluster=cluster_ref(cluster),
                object_type="job",
                object_name=self.chart.gate_names[image],
                object_namespace=AGENT_NAMESPACE,
                json_path=FINISHED,
                timeout=Duration.seconds(wait),
            )
            gate.node.add_dependency(self.manifest)
            self.gates[image] = gate
