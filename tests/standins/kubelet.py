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
The image is this machine's filesystem with the vLLM stand-in (tests/standins/image) on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
IMAGE_PYTHONPATH = f"{REPOSITORY / 'tests' / 'standins' / 'image'}:{REPOSITORY}"
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
    volumes: dict[str, Path] = field(default_factory=dict)
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
            for file, text in config_maps[volume["configMap"]["name"]].items():
                (folder / file).write_text(text)
            run.volumes[name] = folder
        else:
            raise AssertionError(f"volume kind not mirrored: {volume}")


def _env(run: PodRun, container: dict, cluster_env: dict[str, str]) -> dict[str, str]:
    fields = {
        "metadata.uid": run.uid,
        "metadata.name": run.name,
        "metadata.namespace": run.namespace,
        "spec.nodeName": run.node.name,
    }
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/root",
        "PYTHONPATH": IMAGE_PYTHONPATH,
        "PYTHONDONTWRITEBYTECODE": "1",
        **cluster_env,
    }
    for item in container.get("env", []):
        env[item["name"]] = item["value"] if "value" in item else fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def run_container(
    run: PodRun, container: dict, cluster_env: dict[str, str], *, timeout: float = 180, background: bool = False
):
    """One container: its mounts bound at its container paths in a private mount namespace, then exec."""
    root = run.scratch / f"root-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    spec_file = run.scratch / f"{container['name']}-{uuid.uuid4().hex[:8]}.json"
    argv = list(container.get("command", [])) + list(container.get("args", []))
    spec_file.write_text(json.dumps({"argv": argv, "env": _env(run, container, cluster_env)}))
    lines = ["set -e", "mount --make-rprivate /", f"mount -t tmpfs tmpfs {root}"]
    for top in sorted(p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink()):
        lines += [f"mkdir -p {root}{top}", f"mount --rbind {top} {root}{top}"]
    for link in sorted(p for p in Path("/").iterdir() if p.is_symlink()):
        lines.append(f"ln -s {os.readlink(link)} {root}{link}")
    for mount in container.get("volumeMounts", []):
        target = f"{root}{mount['mountPath']}"
        lines += [f"mkdir -p {target}", f"mount --bind {run.volumes[mount['name']]} {target}"]
        if mount.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append(f'exec chroot {root} {sys.executable} -c "{_LAUNCH}" {spec_file}')
    command = ["unshare", "--mount", "sh", "-c", "\n".join(lines)]
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    run.outputs.append(done)
    if done.returncode != 0:
        raise AssertionError(
            f"{container['name']} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return done


def start_pod(node: StandInNode, deployment: dict, config_maps: dict[str, dict[str, str]], scratch: Path) -> PodRun:
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
