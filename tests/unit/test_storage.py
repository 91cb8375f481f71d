"""Whether the weights root lives on the instance-store filesystem, from /proc/self/mountinfo lines as the
kernel writes them (proc(5)); the bind mount's 4th field is its root within the source filesystem."""

import pytest

from node_agent.runtime.storage import off_instance_store, parse_mountinfo

KARPENTER_RAID0 = """\
1321 1300 0:312 / / rw,relatime master:350 - overlay overlay rw,lowerdir=/var/lib/containerd/a
1330 1321 9:127 /warmstart/weights /node-cache/weights rw,relatime - xfs /dev/md127 rw,attr2,inode64,noquota
"""
KARPENTER_WITHOUT_INSTANCE_STORE = """\
1321 1300 0:312 / / rw,relatime master:350 - overlay overlay rw,lowerdir=/var/lib/containerd/a
1330 1321 259:1 /mnt/k8s-disks/0/warmstart/weights /node-cache/weights rw,noatime - xfs /dev/nvme0n1p1 rw
"""
# Bottlerocket: /mnt is a bind of /local/mnt; /mnt/.ephemeral is the RAID0 array when Auto Mode sets it up.
AUTO_MODE_EPHEMERAL = """\
2201 2180 0:401 / / rw,relatime - overlay overlay rw
2210 2201 9:0 /warmstart/weights /node-cache/weights rw,nosuid,nodev,noatime - xfs /dev/md0 rw
"""
AUTO_MODE_ON_ROOT = """\
2201 2180 0:401 / / rw,relatime - overlay overlay rw
2210 2201 259:3 /mnt/.ephemeral/warmstart/weights /node-cache/weights rw,nosuid - ext4 /dev/nvme1n1p1 rw
"""


@pytest.mark.parametrize(
    "text, nvme, ok",
    [
        (KARPENTER_RAID0, "/mnt/k8s-disks/0", True),
        (KARPENTER_WITHOUT_INSTANCE_STORE, "/mnt/k8s-disks/0", False),
        (AUTO_MODE_EPHEMERAL, "/mnt/.ephemeral", True),
        (AUTO_MODE_ON_ROOT, "/mnt/.ephemeral", False),
    ],
)
def test_the_weights_root_must_be_on_the_filesystem_mounted_at_the_nvme_mount(text, nvme, ok):
    problem = off_instance_store(
        mountinfo=text, container_path="/node-cache/weights", host_path=f"{nvme}/warmstart/weights", nvme_mount=nvme
    )
    assert (problem is None) == ok
    if not ok:
        assert "root volume" in problem and "/dev/nvme" in problem


def test_a_folder_that_is_not_mounted_cannot_be_vouched_for():
    problem = off_instance_store(
        mountinfo=KARPENTER_RAID0, container_path="/elsewhere", host_path="/x/y", nvme_mount="/x"
    )
    assert "not a mount" in problem


def test_escaped_paths_are_read_back():
    (entry,) = parse_mountinfo("5 1 8:1 /with\\040space /mnt/a\\040b rw - ext4 /dev/sda1 rw\n")
    assert (entry.root, entry.mount_point) == ("/with space", "/mnt/a b")


def test_the_agents_own_mounts_are_readable_here():
    assert parse_mountinfo(open("/proc/self/mountinfo").read())  # the real file parses
