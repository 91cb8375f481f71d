from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from construct_kit.alerts import AlertTopic
from pruner.construct import CompileCachePruner
from warmstart.active_set import active_set_documents, active_set_parameter_name
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig


class PrunerStack(Stack):
    """Maintenance of the compile-cache bucket; changes with the models (their active set), not with data."""

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.pruner = CompileCachePruner(
            self,
            "CompileCachePruner",
            environment=config.name,
            bucket_name=config.buckets.compile_cache,
            active_set_name=active_set_parameter_name(config),
            active_set_documents=active_set_documents(config, default_catalog()),
            policy=config.pruning,
        )
        self.alerts = AlertTopic(self, "Alerts", environment=config.name, alerts=config.alerts)
        self.alerts.notify(self.pruner.alarms)
