"""Where the cluster's network and API endpoint may be."""

from __future__ import annotations

from warmstart.checks.fix import removing, setting
from warmstart.checks.rule import rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem


def in_region(zone: str, region: str) -> bool:
    return zone.startswith(region) and len(zone) == len(region) + 1 and zone[-1].isalpha()


def two_zones(zones: list[str], region: str) -> list[str]:
    """The zones given that are in the region, with its first zones added up to two."""
    inside = [zone for zone in zones if in_region(zone, region)]
    return (inside + [z for z in (f"{region}a", f"{region}b", f"{region}c") if z not in inside])[: max(2, len(inside))]


@rule()
def _availability_zones(config: EnvironmentConfig) -> list[Problem]:
    network = config.network
    if not network.owned:
        return []
    zones = network.availability_zones
    two = two_zones(zones, config.region)
    if len(zones) < 2:
        return [
            Problem(
                "network.availability_zones",
                "the VPC warmstart creates needs at least 2 zones",
                f"list 2 or more zones of the region, e.g. {' and '.join(two)}, or describe a VPC you already "
                "have under network.existing",
                (setting("network.availability_zones", two),),
            )
        ]
    return [
        Problem(
            f"network.availability_zones[{i}]",
            f"{az!r} is not in region {config.region!r}",
            f"use zones of {config.region}, e.g. {config.region}a and {config.region}b",
            (setting("network.availability_zones", two),),
        )
        for i, az in enumerate(zones)
        if not in_region(az, config.region)
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
                (
                    removing("cluster.public_access_cidrs"),
                    setting("cluster.endpoint_access", "public_and_private"),
                ),
            )
        ]
    return []
