"""The node's mount shape, built for real in a private mount namespace (run as root under `unshare -m`), and what a
container's process can write through it: a tmpfs for the node's root with a second tmpfs below it at the NVMe
array's place, holding a pod's record folder (root-owned, 0755, as kubelet makes it), seen through

- `readOnly: true`: a recursive bind with only its top mount made read-only (runc's bind of a read-only hostPath);
- `recursiveReadOnly: Enabled`: the same bind made read-only throughout (mount_setattr with AT_RECURSIVE, as runc
  does for it),

by a process that runs as root or as 65534, with or without no_new_privs (allowPrivilegeEscalation: false), and
that writes with a setuid-root program its image could ship; and whether that process can connect to a root-owned
socket below the view (the container runtime's, in `/run`): a read-only mount, recursive or not, does not stop a
connect. Prints one JSON object: case -> written (or connected)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls share one table)
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
_PR_SET_NO_NEW_PRIVS = 38
RECORD = "mnt/nvme/warmstart/pods/5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10/record.json"
SOCKET = "run/engine.sock"  # root-owned, 0660: the container runtime's socket


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _run(*command: str) -> None:
    subprocess.run(command, check=True)


def _recursively_read_only(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(
        _SYS_MOUNT_SETATTR, _AT_FDCWD, str(path).encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
    ):
        raise OSError(ctypes.get_errno(), "mount_setattr")


def _writes(view: Path, program: Path, *, uid: int, no_new_privs: bool) -> bool:
    executable = os.open(program, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:  # the container's process: in the view (its mount), not needing to reach it through the test's folders
        try:
            os.chdir(view)
            if no_new_privs:
                ctypes.CDLL(None).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.execve(executable, [program.name, RECORD], {})
        finally:
            os._exit(127)
    os.close(executable)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _connects(view: Path, *, uid: int) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(view)
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(SOCKET)
            os._exit(0)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def build_and_try(workdir: Path) -> dict[str, bool]:
    host, image = workdir / "host", workdir / "image"
    for folder in (host, image):
        folder.mkdir()
        _run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder))
    (host / "mnt/nvme").mkdir(parents=True)
    _run("mount", "-t", "tmpfs", "-o", "mode=0755", "array", str(host / "mnt/nvme"))
    (host / RECORD).parent.mkdir(parents=True, mode=0o755)
    (host / "run").mkdir(mode=0o755)
    engine = socket.socket(socket.AF_UNIX)
    engine.bind(str(host / SOCKET))
    os.chmod(host / SOCKET, 0o660)
    engine.listen(16)
    program = image / "touch"  # a setuid-root program an image may ship
    touch = shutil.which("touch")
    assert touch is not None, "touch(1) is needed to make the setuid program"
    shutil.copy(touch, program)
    os.chmod(program, 0o4755)
    views = {"readOnly": workdir / "view", "recursiveReadOnly": workdir / "rview"}
    for folder in views.values():
        folder.mkdir()
        _run("mount", "--rbind", str(host), str(folder))
    _run("mount", "-o", "remount,bind,ro", str(views["readOnly"]))
    _recursively_read_only(views["recursiveReadOnly"])
    results = {}
    for mode, view in views.items():
        for uid in (0, 65534):
            for no_new_privs in (False, True):
                case = f"{mode},uid={uid},no_new_privs={no_new_privs}"
                results[case] = _writes(view, program, uid=uid, no_new_privs=no_new_privs)
                (host / RECORD).unlink(missing_ok=True)
            results[f"connect,{mode},uid={uid}"] = _connects(view, uid=uid)
    engine.close()
    return results


if __name__ == "__main__":
    print(json.dumps(build_and_try(Path(sys.argv[1]))))
