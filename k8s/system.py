"""The namespace of warmstart's own node-level components (agent, image cache), created once."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from warmstart.agent_settings import AGENT_NAMESPACE

SYSTEM_LABELS = {"app.kubernetes.io/part-of": "warmstart"}


class SystemNamespace(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.namespace_object = k8s.KubeNamespace(
            self, "Namespace", metadata=k8s.ObjectMeta(name=AGENT_NAMESPACE, labels=SYSTEM_LABELS)
        )
