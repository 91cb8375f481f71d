"""Whether a host folder the agent mounts lives on the node's instance-store filesystem.

hostPath DirectoryOrCreate creates the folder wherever the path resolves: on a node without instance store
(or with Auto Mode's ephemeralStorage at or above the NVMe size, or Karpenter without RAID0) the NVMe mount
point is a plain folder of the root volume, and filling it with hundreds of GB of weights fills the root
EBS volume. The container's /proc/self/mountinfo tells: the bind mount of a folder that is on the
filesystem mounted at the NVMe mount point has, as its root within that filesystem, the folder's path
relative to the mount point; anywhere else it has a longer path (proc(5), /proc/[pid]/mountinfo, field 4).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class MountEntry:
    root: str
    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        separator = fields.index("-")
        entries.append(
            MountEntry(
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                fstype=fields[separator + 1],
                source=fields[separator + 2],
            )
        )
    return entries


def off_instance_store(*, mountinfo: str, container_path: str, host_path: str, nvme_mount: str) -> str | None:
    """Why the folder mounted at `container_path` (the host's `host_path`) is not on the filesystem mounted at
    `nvme_mount`, or None when it is."""
    entries = [e for e in parse_mountinfo(mountinfo) if e.mount_point == container_path.rstrip("/")]
    if not entries:
        return f"{container_path} is not a mount in this container: cannot tell where {host_path} lives"
    entry = entries[-1]  # the topmost mount at that point
    expected = "/" + posixpath.relpath(host_path, nvme_mount)
    if entry.root == expected:
        return None
    return (
        f"{host_path} is on {entry.source} ({entry.fstype}) at {entry.root}, not on a filesystem mounted at "
        f"{nvme_mount}: this node has no instance-store NVMe set up there (an instance without instance "
        "store, Auto Mode ephemeralStorage at or above the NVMe size, or Karpenter without RAID0), so the "
        "weights would fill the root volume; the agent does not fill it and pods stream from S3"
    )


def check_host_folder(*, container_path: str, host_path: str, nvme_mount: str) -> str | None:
    try:
        text = MOUNTINFO.read_text()
    except OSError as error:
        return f"cannot read {MOUNTINFO}: {error}"
    return off_instance_store(mountinfo=text, container_path=container_path, host_path=host_path, nvme_mount=nvme_mount)
