"""The GPU nodes' operating systems, one object each (warmstart/node_os/base.py says what each answers).

A Karpenter pool's OS is the family of its pinned AMI alias; Auto Mode's is its own. Each compute mode's settings
answer `node_os` (warmstart/config/compute.py). Adding an OS is one module here: every module's NodeOs classes register.
"""

from __future__ import annotations

from warmstart.discovery import subclasses_in
from warmstart.node_os.al2023 import DEFAULT_AMI_ALIAS
from warmstart.node_os.auto_mode import AutoModeOs
from warmstart.node_os.base import NodeOs, SnapshotObstacle, release

# Every OS a Karpenter pool can pin by its AMI alias: the NodeOs classes of this package that have one.
KARPENTER_NODE_OSES: dict[str, type[NodeOs]] = {
    os.name: os for os in subclasses_in(__name__, __path__, NodeOs) if os.pinned_by_alias
}
if missing := [name for name, os in KARPENTER_NODE_OSES.items() if not os.alias_example]:
    raise TypeError(f"node OS {', '.join(missing)}: an OS pinned by an AMI alias needs its alias_example")
AUTO_MODE_OS: NodeOs = AutoModeOs()
# A pinned EKS AMI alias of a known family: "latest" would roll nodes on every AMI release.
AMI_ALIAS_PATTERN = rf"^({'|'.join(KARPENTER_NODE_OSES)})@v?\d+(\.\d+)*$"


def karpenter_node_os(alias: str) -> NodeOs:
    """The OS of a Karpenter pool pinned to this AMI alias (the config's pattern admits only known families)."""
    return KARPENTER_NODE_OSES[alias.split("@", 1)[0]](alias)


def alias_for_kubernetes(alias: str, kubernetes_version: str) -> str:
    """The alias, raised where its OS has no image of the cluster's Kubernetes version before some release."""
    return KARPENTER_NODE_OSES[alias.split("@", 1)[0]].alias_for_kubernetes(alias, kubernetes_version)


def snapshot_aliases() -> list[str]:
    """The oldest ami_alias of each OS that can boot from an image snapshot."""
    return [alias for os in KARPENTER_NODE_OSES.values() if (alias := os.snapshot_alias())]


__all__ = [
    "AMI_ALIAS_PATTERN",
    "AUTO_MODE_OS",
    "DEFAULT_AMI_ALIAS",
    "KARPENTER_NODE_OSES",
    "NodeOs",
    "alias_for_kubernetes",
    "SnapshotObstacle",
    "karpenter_node_os",
    "release",
    "snapshot_aliases",
]
