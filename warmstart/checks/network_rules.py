"""Where the cluster's network and API endpoint may be."""

from __future__ import annotations

from warmstart.checks.problem import Problem
from warmstart.checks.rule import rule
from warmstart.config import EnvironmentConfig


@rule()
def _availability_zones(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"network.availability_zones[{i}]",
            f"{az!r} is not in region {config.region!r}",
            f"use zones of {config.region}, e.g. {config.region}a and {config.region}b",
        )
        for i, az in enumerate(config.network.availability_zones)
        if not (az.startswith(config.region) and len(az) == len(config.region) + 1 and az[-1].isalpha())
    ]


@rule()
def _endpoint_access(config: EnvironmentConfig) -> list[Problem]:
    cluster = config.cluster
    if cluster.endpoint_access == "private" and cluster.public_access_cidrs:
        return [
            Problem(
                "cluster.public_access_cidrs",
                "public CIDRs are set but the endpoint is private",
                "remove public_access_cidrs, or set endpoint_access: public_and_private",
            )
        ]
    return []
