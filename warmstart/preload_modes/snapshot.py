"""New nodes boot with the images already on their data volume, made from an EBS snapshot the stack builds
(Karpenter with Bottlerocket); the prepull DaemonSets stay for nodes that predate a new snapshot."""

from __future__ import annotations

from warmstart.preload_modes.base import Environment, PreloadMode, rollout_gate


class Snapshot(PreloadMode):
    name = "snapshot"
    prepulls = True
    boots_with_images = True

    def route(self, config: Environment) -> str:
        snapshot = config.image_preload.snapshot
        rate = (
            f", its blocks initialized at {snapshot.volume_initialization_rate_mibps} MiB/s"
            if snapshot.volume_initialization_rate_mibps
            else ", its blocks fetched from S3 on first read"
        )
        return (
            f"on disk when a new node boots: its {snapshot.data_volume_gib} GiB data volume starts from the image "
            f"snapshot the stack builds{rate}; {rollout_gate(config)}; nodes older than a new snapshot get it from "
            "the prepull DaemonSet"
        )
