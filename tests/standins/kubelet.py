"""Runs a pod of a rendered Deployment on a stand-in node the way kubelet and containerd do.

Mirrors, in the ways the caches depend on (kubelet and containerd sources read in review; docs/upstream-facts.md):
1. Volumes are set up before anything of the pod runs: a hostPath of type DirectoryOrCreate is created with
   os.MkdirAll(path, 0755) on the node (kubernetes pkg/volume/hostpath/host_path.go makeDir), never
   relabelled; kubelet's SyncPod waits for it (WaitForAttachAndMount) before the sandbox, image pulls and
   init containers (pkg/kubelet/kubelet.go, kuberuntime_manager.go SyncPod steps 4-7).
2. Init containers run one after another to completion, then the main container.
3. A container's volumes are bind mounts of the host path as it resolves when that container is created
   (containerd v2.2 internal/cri/opts/spec_linux_opts.go WithMounts, runc v1.5 rootfs_linux.go): here a
   private mount namespace whose root holds exactly the container paths of the manifest, so the pod's
   absolute paths (which vLLM hashes) are the real ones on every stand-in node.
4. A container's environment, command and arguments are built as kubelet and containerd build them
   (tests/standins/container_env.py): service links of the namespace's Services unless the pod turns them off,
   the API server's own Service always, env and envFrom in kubelet's order, downward API values, `$(VAR)`
   expansion, then the image's ENV beneath.
The image is this machine's filesystem with the vLLM stand-in (tests/standins/image) on PYTHONPATH, unless a
test names another (`image_env`, the real vLLM tier's).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.standins.container_env import expand, expanded_command, kubelet_environment, process_environment

REPOSITORY = Path(__file__).resolve().parents[2]
IMAGE_BIN = REPOSITORY / "tests" / "standins" / "image" / "bin"
IMAGE_PYTHONPATH = f"{REPOSITORY / 'tests' / 'standins' / 'image'}:{REPOSITORY}"
# The stand-in image's ENV: this machine's Python, with the vLLM stand-in and the repository importable.
STANDIN_IMAGE_ENV = {
    # The image's `vllm` first (its ENTRYPOINT runs `vllm serve`), then this machine's Python.
    "PATH": f"{IMAGE_BIN}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
    "PYTHONPATH": IMAGE_PYTHONPATH,
    "PYTHONDONTWRITEBYTECODE": "1",
}
_LAUNCH = (
    "import json, os, sys; spec = json.load(open(sys.argv[1])); os.execvpe(spec['argv'][0], spec['argv'], spec['env'])"
)


@dataclass
class StandInNode:
    name: str
    root: Path  # the node's filesystem: host path /x/y lives at root/x/y

    def host(self, path: str) -> Path:
        return self.root / path.lstrip("/")


@dataclass
class PodRun:
    uid: str
    name: str
    namespace: str
    node: StandInNode
    spec: dict
    scratch: Path
    # The Services of the cluster as kubelet lists them (with their cluster IPs): the source of service links.
    services: list[dict] = field(default_factory=list)
    image_env: dict[str, str] = field(default_factory=lambda: dict(STANDIN_IMAGE_ENV))
    pod_ip: str = "10.0.0.10"
    volumes: dict[str, Path] = field(default_factory=dict)
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    outputs: list[subprocess.CompletedProcess] = field(default_factory=list)

    @property
    def report(self) -> dict:
        for line in reversed(self.outputs[-1].stdout.splitlines()):
            if line.startswith("STANDIN-REPORT "):
                return json.loads(line.removeprefix("STANDIN-REPORT "))
        raise AssertionError(f"no report; stdout:\n{self.outputs[-1].stdout}\nstderr:\n{self.outputs[-1].stderr}")

    def as_api_object(self, *, ready: bool, phase: str = "Running") -> dict:
        """The pod as the API server lists it to the node agent."""
        labels = self.spec.get("_labels", {})
        return {
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid, "labels": labels},
            "spec": {"nodeName": self.node.name, "volumes": [v for v in self.spec["volumes"]]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    def bound_pod(self) -> dict:
        """The pod as kubelet reads it: its template after admission, bound to the node."""
        spec = {k: v for k, v in self.spec.items() if k != "_labels"}
        return {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "labels": self.spec.get("_labels", {}),
            },
            "spec": {**spec, "nodeName": self.node.name},
            "status": {"podIP": self.pod_ip, "hostIP": "10.0.0.2"},
        }

    def kubelet_env(self, container: dict, cluster_env: dict[str, str]) -> dict[str, str]:
        """The variables kubelet builds for one container. `cluster_env` is what admission adds to every
        container's env (on EKS the Pod Identity webhook's credential variables; here the test S3 server's)."""
        admitted = {
            **container,
            "env": [*container.get("env", []), *({"name": k, "value": v} for k, v in cluster_env.items())],
        }
        return kubelet_environment(self.bound_pod(), admitted, services=self.services, config_maps=self.config_maps)

    def environment(self, container: dict, cluster_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of one container's first process."""
        kubelet_env = self.kubelet_env(container, cluster_env)
        # runc's HOME: root's passwd entry, or "/" for a user the image does not list (the stand-in image lists
        # only root).
        user = (container.get("securityContext") or {}).get("runAsUser")
        return expanded_command(container, kubelet_env), process_environment(
            kubelet_env, image_env=self.image_env, hostname=self.name, home="/root" if user in (None, 0) else "/"
        )

    def mount_source(self, mount: dict, kubelet_env: dict[str, str]) -> Path:
        """The host folder a volumeMount binds: the volume's, or its subPath / subPathExpr child, which kubelet
        creates when missing with the volume folder's mode (kubernetes v1.35.4 pkg/kubelet/kubelet_pods.go
        makeMounts, pkg/kubelet/container/helpers.go ExpandContainerVolumeMounts: every variable the expression
        names must be set and non-empty; the result may not be absolute nor step back)."""
        source = self.volumes[mount["name"]]
        sub_path = mount.get("subPath", "")
        if mount.get("subPathExpr"):
            names = re.findall(r"\$\(([^)]*)\)", mount["subPathExpr"])
            missing = [n for n in names if not kubelet_env.get(n)]
            if missing:
                raise AssertionError(f"kubelet refuses the mount {mount['name']}: missing value for {missing}")
            sub_path = expand(mount["subPathExpr"], kubelet_env)
        if not sub_path:
            return source
        if sub_path.startswith("/") or ".." in sub_path.split("/"):
            raise AssertionError(f"kubelet refuses the subPath {sub_path!r}")
        child = source / sub_path
        if not child.exists():
            child.mkdir(parents=True, mode=source.stat().st_mode & 0o7777)
        return child


def pod_template(deployment: dict) -> dict:
    template = deployment["spec"]["template"]
    return {**template["spec"], "_labels": template["metadata"]["labels"]}


def set_up_volumes(run: PodRun, config_maps: dict[str, dict[str, str]]) -> None:
    """kubelet's volume setup, before any container of the pod starts."""
    for volume in run.spec["volumes"]:
        name = volume["name"]
        if "hostPath" in volume:
            path = run.node.host(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate" and not path.exists():
                old = os.umask(0o022)
                try:
                    path.mkdir(parents=True, mode=0o755)
                finally:
                    os.umask(old)
            run.volumes[name] = path
        elif "emptyDir" in volume:
            run.volumes[name] = run.scratch / "empty" / name
            run.volumes[name].mkdir(parents=True)
        elif "configMap" in volume:
            folder = run.scratch / "configmaps" / name
            folder.mkdir(parents=True)
            data = config_maps[volume["configMap"]["name"]]
            # With items, only the listed keys, each at its path (below the mount, folders made); else every key.
            # kubelet's atomic writer: the files in a timestamped folder, `..data` linking to it, and each first
            # path segment a link through `..data` (pkg/volume/util/atomic_writer.go).
            items = volume["configMap"].get("items") or [{"key": key, "path": key} for key in data]
            revision = folder / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{uuid.uuid4().int % 10**9}"
            for item in items:
                target = revision / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])
            (folder / "..data").symlink_to(revision.name)
            for top in sorted({item["path"].split("/")[0] for item in items}):
                (folder / top).symlink_to(f"..data/{top}")
            run.volumes[name] = folder
        else:
            raise AssertionError(f"volume kind not mirrored: {volume}")


def run_container(
    run: PodRun, container: dict, cluster_env: dict[str, str], *, timeout: float = 180, background: bool = False
):
    """One container: its mounts bound at its container paths in a private mount namespace, then exec."""
    root = run.scratch / f"root-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    spec_file = run.scratch / f"{container['name']}-{uuid.uuid4().hex[:8]}.json"
    argv, env = run.environment(container, cluster_env)
    kubelet_env = run.kubelet_env(container, cluster_env)
    spec_file.write_text(json.dumps({"argv": argv, "env": env}))
    lines = ["set -e", "mount --make-rprivate /", f"mount -t tmpfs tmpfs {root}"]
    for top in sorted(p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink()):
        lines += [f"mkdir -p {root}{top}", f"mount --rbind {top} {root}{top}"]
    for link in sorted(p for p in Path("/").iterdir() if p.is_symlink()):
        lines.append(f"ln -s {os.readlink(link)} {root}{link}")
    for mount in container.get("volumeMounts", []):
        target = f"{root}{mount['mountPath']}"
        lines += [f"mkdir -p {target}", f"mount --bind {run.mount_source(mount, kubelet_env)} {target}"]
        if mount.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append(f'exec chroot {root} {sys.executable} -c "{_LAUNCH}" {spec_file}')
    command = ["unshare", "--mount", "sh", "-c", "\n".join(lines)]
    if background:  # its own process group: a caller stops the container and whatever it started at once
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    run.outputs.append(done)
    if done.returncode != 0:
        raise AssertionError(
            f"{container['name']} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return done


def start_pod(
    node: StandInNode,
    deployment: dict,
    config_maps: dict[str, dict[str, str]],
    scratch: Path,
    *,
    services: list[dict] | None = None,
    image_env: dict[str, str] | None = None,
) -> PodRun:
    """Scheduled and bound to the node: its volumes exist; no container has run yet."""
    template = pod_template(deployment)
    uid = str(uuid.uuid4())
    run = PodRun(
        uid=uid,
        name=f"vllm-{uid[:8]}",
        namespace=deployment["metadata"]["namespace"],
        node=node,
        spec=template,
        scratch=scratch / uid,
        services=list(services or []),
        image_env=dict(image_env if image_env is not None else STANDIN_IMAGE_ENV),
        config_maps=config_maps,
    )
    run.scratch.mkdir(parents=True)
    set_up_volumes(run, config_maps)
    return run


def run_pod(run: PodRun, cluster_env: dict[str, str], *, timeout: float = 180) -> PodRun:
    """Init containers in order, then the main container, each to completion."""
    for container in run.spec.get("initContainers", []):
        run_container(run, container, cluster_env, timeout=timeout)
    (main,) = run.spec["containers"]
    run_container(run, main, cluster_env, timeout=timeout)
    return run
