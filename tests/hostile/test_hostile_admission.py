"""Issue 45's findings on the host-path admission policy (node_agent/host_path_policy.py), each as the pod a
hostile neighbour would create, evaluated as the API server evaluates the policy (tests/infra/test_host_path_policy.py
`admitted`), and the read-only finding at the mount level, on the same shapes built for real (mount_shape.py)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from tests.admission_policy import MODEL, OTHER, _host, _plain_pod, admitted

UID = "5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10"
NODE_EXPORTER_USER = {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True, "fsGroup": 65534}


def _reader(path: str, *, pod_context: dict | None = None, container_context: dict | None = None, **mount) -> dict:
    """A pod mounting host `path` read-only at /host (node-exporter's shape when the contexts are its chart's)."""
    reader = _plain_pod(volume=_host("h", path), mount={"name": "h", "mountPath": "/host", "readOnly": True, **mount})
    if pod_context:
        reader["spec"]["securityContext"] = pod_context
    if container_context:
        reader["spec"]["containers"][0]["securityContext"] = container_context
    return reader


def _parents(roots: dict) -> dict[str, str]:
    nvme = roots["records"].rsplit("/warmstart", 1)[0]
    return {"the node's root": "/", "/mnt": "/mnt", "the NVMe mount's parent": nvme.rsplit("/", 1)[0], "//": "//"}


@pytest.mark.parametrize("namespace", [OTHER, "default"])
def test_a_read_only_parent_of_the_roots_is_refused_to_a_pod_that_could_write_below_it(policy, roots, namespace):
    """P1: `readOnly` left the NVMe array's mount below `/` writable, and the policy admitted any read-only mount."""
    no_escalation = {"allowPrivilegeEscalation": False}
    for name, path in _parents(roots).items():
        assert not admitted(policy, _reader(path), namespace), name  # root
        exporter = _reader(
            path,
            mountPropagation="HostToContainer",
            pod_context=NODE_EXPORTER_USER,
            container_context={"readOnlyRootFilesystem": True},
        )
        assert not admitted(policy, exporter, namespace), name  # node-exporter's chart: non-root, may escalate
        fixed = copy.deepcopy(exporter)
        fixed["spec"]["containers"][0]["securityContext"].update(no_escalation)
        assert admitted(policy, fixed, namespace), name  # its chart with allowPrivilegeEscalation: false
        # Recursively read-only stops the writes, not a connect to the runtime's socket below (the mount test).
        assert not admitted(policy, _reader(path, recursiveReadOnly="Enabled"), namespace), name
        writable = _reader(path)
        writable["spec"]["containers"][0]["volumeMounts"][0].pop("readOnly")
        assert not admitted(policy, writable, namespace), name  # dropping readOnly is no way around
        as_root = _reader(path, pod_context={"runAsUser": 0}, container_context=no_escalation)
        assert not admitted(policy, as_root, namespace), name
        overridden = _reader(path, pod_context=NODE_EXPORTER_USER, container_context={**no_escalation, "runAsUser": 0})
        assert not admitted(policy, overridden, namespace), name


def test_proc_reaches_the_roots_through_its_links_whatever_the_mount_flags(policy, roots):
    """A /proc process folder holds `root`, a link to the node's root that no mount flag governs: only a
    process that cannot become root is kept out of it (it cannot follow root's links)."""
    safe = {"pod_context": NODE_EXPORTER_USER, "container_context": {"allowPrivilegeEscalation": False}}
    for path in ("/proc", "/proc/1", "/proc/self", "/proc/1/root", "/proc/1/task/1/cwd", "/proc/1/root/mnt"):
        assert not admitted(policy, _reader(path), OTHER), path
        assert not admitted(policy, _reader(path, recursiveReadOnly="Enabled"), OTHER), path
        assert admitted(policy, _reader(path, **safe), OTHER), path
    assert admitted(policy, _reader("/proc/sys/net"), OTHER)  # no process folder: no link to the node's root
    assert admitted(policy, _reader(roots["weights"]), OTHER)  # a root itself: nothing is mounted below it


@pytest.mark.parametrize(
    "path",
    [
        "/proc/1/root{records}",
        "/proc/self/root{records}",
        "/proc/thread-self/root{records}",
        "/proc/1/cwd{records}",
        "/proc/1/task/1/root{records}",
        "/proc/1/root",
        "/proc/self/fd/3",
    ],
)
def test_a_proc_link_spelling_is_refused_writable(policy, roots, path):
    """P2: the doc said writable paths under /proc are refused; `/proc/1/root<records root>` was admitted."""
    spelled = path.format(records=roots["records"])
    writer = _plain_pod(volume=_host("h", spelled), mount={"name": "h", "mountPath": "/h"})
    assert not admitted(policy, writer, OTHER)
    assert not admitted(policy, writer, "default")


def test_a_pod_outside_the_model_namespaces_may_not_mount_its_own_record_folder(policy, roots):
    """P2: the rendered record mount was admitted everywhere; a team's pod then held downloads back with its record.
    It is admitted where warmstart renders it, a model's namespace (the agent refuses the rest:
    test_hostile_neighbours.py)."""
    env = [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    mount = {"name": "h", "mountPath": "/warmstart-pods", "subPathExpr": "$(POD_UID)"}
    own = _plain_pod(volume=_host("h", roots["records"]), mount=mount, env=env)
    assert not admitted(policy, own, OTHER)
    assert not admitted(policy, own, "default")


@pytest.mark.parametrize(
    "change",
    [
        ("pod", {"seccompProfile": {"type": "Unconfined"}}),
        ("container", {"seccompProfile": {"type": "Unconfined"}}),
        ("pod", {"appArmorProfile": {"type": "Unconfined"}}),
        ("container", {"appArmorProfile": {"type": "Unconfined"}}),
        ("annotation", {"container.apparmor.security.beta.kubernetes.io/vllm": "unconfined"}),
        ("pod", {"seLinuxOptions": {"type": "spc_t"}}),
        ("container", {"seLinuxOptions": {"type": "super_t"}}),
        ("container", {"seLinuxOptions": {"user": "system_u"}}),
        ("pod", {"seLinuxOptions": {"role": "system_r"}}),
        ("container", {"procMount": "Unmasked"}),
        ("pod", {"sysctls": [{"name": "kernel.core_pattern", "value": "|/x"}]}),
        ("pod", {"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}),
    ],
    ids=lambda change: f"{change[0]}:{json.dumps(change[1])}",
)
def test_a_models_namespace_keeps_baselines_confinement(policy, pod, change):
    """P2: a model's namespace is Pod Security `privileged` (its pods mount hostPaths); the policy admitted
    unconfined seccomp, AppArmor and SELinux, an unmasked /proc and node-wide sysctls there."""
    where, fields = change
    changed = copy.deepcopy(pod)
    if where == "annotation":
        changed["metadata"].setdefault("annotations", {}).update(fields)
    elif where == "pod":
        changed["spec"].setdefault("securityContext", {}).update(fields)
    else:
        for name in ("containers", "initContainers"):
            for container in changed["spec"].get(name, []):
                container.setdefault("securityContext", {}).update(fields)
    assert not admitted(policy, changed)


def test_baselines_allowed_values_stay_admitted_in_a_models_namespace(policy, pod):
    changed = copy.deepcopy(pod)
    changed["spec"].setdefault("securityContext", {}).update(
        seccompProfile={"type": "RuntimeDefault"},
        seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"},
        sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
    )
    changed["metadata"].setdefault("annotations", {})["container.apparmor.security.beta.kubernetes.io/vllm"] = (
        "runtime/default"
    )
    assert admitted(policy, changed)
    assert MODEL == changed["metadata"]["namespace"]


def _has_capability(bit: int) -> bool:
    """Whether this process holds the capability (capabilities(7) numbering) in its effective set."""
    with open("/proc/self/status") as status:
        effective = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> bit & 1)


CAP_CHOWN, CAP_SYS_ADMIN = 0, 21


def _mount_shape(tmp_path) -> dict[str, bool]:
    """Skipped only where mounts cannot be made at all (no CAP_SYS_ADMIN: not root, or a confined container); here
    and in CI the tests run as root, and then a failure to build the shape fails the test."""
    if not _has_capability(CAP_SYS_ADMIN):
        pytest.skip("building the node's mount shape needs CAP_SYS_ADMIN (CI runs as root)")
    answer = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-m", "tests.hostile.mount_shape", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def test_at_the_mount_level_what_the_policy_admits_can_neither_write_nor_reach_the_runtime(policy, tmp_path):
    """The same shapes for real: a record is written through a read-only `/` by root, and by a non-root process
    that may escalate (a setuid program of its image); not through a recursively read-only one, nor by a non-root
    process without privilege escalation. But root connects to the runtime's socket through a recursively read-only
    `/` (a connect ignores mount flags), and the runtime starts any container: so only the non-root shape is
    admitted, and every shape the policy admits neither writes nor connects."""
    seen = _mount_shape(tmp_path)
    assert seen["readOnly,uid=0,no_new_privs=False"]  # the finding, on a real kernel
    assert seen["readOnly,uid=65534,no_new_privs=False"]  # why allowPrivilegeEscalation: false is asked
    assert not seen["recursiveReadOnly,uid=0,no_new_privs=False"]  # writes stopped...
    assert seen["connect,recursiveReadOnly,uid=0"]  # ...and the runtime still reached
    for mode in ("readOnly", "recursiveReadOnly"):
        for uid in (0, 65534):
            for no_new_privs in (False, True):
                mount = {"recursiveReadOnly": "Enabled"} if mode == "recursiveReadOnly" else {}
                context = {"runAsUser": uid, "allowPrivilegeEscalation": not no_new_privs}
                if admitted(policy, _reader("/", container_context=context, **mount), OTHER):
                    assert not seen[f"{mode},uid={uid},no_new_privs={no_new_privs}"]
                    assert not seen[f"connect,{mode},uid={uid}"]


def test_the_preflight_reads_a_read_only_mount_as_the_policy_does(policy, roots):
    """The existing-cluster preflight lists the running workloads whose pods the policy would refuse
    (warmstart_cli/host_root_mounts.py): the same verdict as the policy's CEL on every shape above."""
    from warmstart_cli.host_root_mounts import refused_mounts

    root_list = [r.rstrip("/") + "/" for r in roots.values()]
    no_escalation = {"allowPrivilegeEscalation": False}
    shapes = []
    for path in [*_parents(roots).values(), "/proc", "/proc/1/root", "/proc/sys/net", roots["weights"], "/var/log"]:
        shapes += [
            _reader(path),
            _reader(path, recursiveReadOnly="Enabled"),
            _reader(path, pod_context=NODE_EXPORTER_USER),
            _reader(path, pod_context=NODE_EXPORTER_USER, container_context=no_escalation),
            _reader(path, pod_context={"runAsUser": 0}, container_context=no_escalation),
            _reader(path, container_context={**no_escalation, "runAsNonRoot": True}),
            _reader(path, container_context={**no_escalation, "runAsUser": 1000, "privileged": True}),
            _reader(path, container_context={"privileged": True}),
            _reader(path, container_context={"capabilities": {"add": ["CAP_SYS_ADMIN"]}}),
            _reader(path, container_context={"capabilities": {"add": ["NET_ADMIN"]}}),
        ]
    for shape in shapes:
        assert admitted(policy, shape, OTHER) == (not refused_mounts(shape["spec"], root_list)), shape


def test_the_agent_keeps_its_folders_root_owned_and_writable_by_root_only(tmp_path):
    """What the non-root alternative rests on: a process that cannot become root cannot write warmstart's folders
    (the agent fixes them at start; a link is left alone)."""
    from node_agent.runtime.fs import keep_root_owned

    if not _has_capability(CAP_CHOWN):
        pytest.skip("changing a folder's owner needs CAP_CHOWN (CI runs as root)")
    loose, fine, link = tmp_path / "loose", tmp_path / "fine", tmp_path / "link"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    os.chown(loose, 65534, 65534)
    fine.mkdir(mode=0o755)
    os.chmod(fine, 0o755)
    link.symlink_to(loose)
    assert keep_root_owned([loose, fine, link, tmp_path / "absent"]) == {str(loose): "fixed"}
    status = loose.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (0, 0, 0o755)
    # The agent runs with every capability dropped: a folder another user owns is reported, never a crash.
    os.chown(loose, 65534, 65534)
    script = (
        "from pathlib import Path; from node_agent.runtime.fs import keep_root_owned; "
        f"print(keep_root_owned([Path({str(loose)!r})]))"
    )
    answer = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert answer.returncode == 0 and "not fixed: Operation not permitted" in answer.stdout, answer.stderr


def _policy_trusting(roots: dict, readers: list[str]) -> dict:
    """The host-path policy as the chart renders it for a config that trusts `readers`."""
    import cdk8s

    from node_agent.host_path_policy import host_path_policy

    chart = cdk8s.Chart(cdk8s.App(), "Policy")
    host_path_policy(
        chart,
        compile_root=roots["compile"],
        weights_root=roots["weights"],
        records_root=roots["records"],
        agent_host_paths=[],
        labels={},
        trusted_readers=readers,
    )
    (found,) = [o for o in chart.to_json() if o["kind"] == "ValidatingAdmissionPolicy"]
    return found["spec"]


def test_node_agents_the_cluster_trusts_read_the_root_as_they_do(policy, roots):
    """From the first-cluster review: the GPU Operator's device plugin (privileged, `/` read-only with
    HostToContainer) and security agents given CAP_SYS_ADMIN are the node's root whatever they mount: the policy
    leaves them be. A root agent that is neither (CloudWatch's, reading `/` read-only) is admitted where its
    namespace is listed in cluster.trusted_node_readers, and nowhere else."""
    operator = _reader("/", mountPropagation="HostToContainer", container_context={"privileged": True})
    assert admitted(policy, operator, "gpu-operator")
    assert admitted(policy, _reader("/proc", container_context={"capabilities": {"add": ["SYS_ADMIN"]}}), OTHER)
    cloudwatch = _reader("/", container_context={"runAsUser": 0})
    assert not admitted(policy, cloudwatch, "amazon-cloudwatch")
    trusting = _policy_trusting(roots, ["amazon-cloudwatch"])
    assert admitted(trusting, cloudwatch, "amazon-cloudwatch")
    assert not admitted(trusting, cloudwatch, OTHER)
    writer = _plain_pod(volume=_host("h", roots["records"]), mount={"name": "h", "mountPath": "/h"})
    assert not admitted(trusting, writer, "amazon-cloudwatch")  # trusted to read, never to write a root


def test_bottlerockets_local_mnt_is_the_same_folder(policy, roots):
    """From the first-cluster review: Bottlerocket's /mnt is /local/mnt, so `/local` holds the array as `/` does."""
    assert not admitted(policy, _reader("/local"), OTHER)
    assert not admitted(policy, _reader("/local/mnt"), OTHER)
    writer = _plain_pod(volume=_host("h", "/local" + roots["records"]), mount={"name": "h", "mountPath": "/h"})
    assert not admitted(policy, writer, OTHER)


def test_warmstarts_own_namespaces_are_never_trusted_readers():
    import yaml

    from contracts.agent_settings import AGENT_NAMESPACE
    from tests.fixes import refused
    from tests.synth import ROOT

    document = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    model = document["models"][0]["name"]
    document["cluster"]["trusted_node_readers"] = ["datadog", AGENT_NAMESPACE, model]
    (problem,) = [p for p in refused(document) if p.field == "cluster.trusted_node_readers"]  # its fix applied too
    assert AGENT_NAMESPACE in problem.message and model in problem.message and "remove" in problem.fix


def test_pods_created_before_the_policy_can_still_be_updated(policy):
    """From the first-cluster review: the policy judged every pod update, so a pod created before it with a mount
    it now refuses could not take a label or lose a finalizer (and never finished terminating). A pod's volumes
    and containers are fixed at creation; only ephemeral containers come by an update, of their subresource."""
    rules = {
        resource: tuple(rule["operations"])
        for rule in policy["matchConstraints"]["resourceRules"]
        for resource in rule["resources"]
    }
    assert rules == {"pods": ("CREATE",), "pods/ephemeralcontainers": ("UPDATE",)}
