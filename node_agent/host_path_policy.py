"""Admission: no pod writes the agent's inputs on a node except through the mounts warmstart renders.

The agent trusts a pod's record only for that pod (its folder is named by kubelet after the pod's UID), a compile
folder only for the model whose namespace mounts it, and the weights copies because no pod can write them. Those
promises hold only if pods cannot mount the warmstart folders otherwise. A ValidatingAdmissionPolicy on every pod
checks three things:

1. **In a model's namespace** (labelled by the chart as a warmstart vLLM namespace; its name is the model's), a pod
   runs only as warmstart renders it: its volumes are emptyDir, configMap, secret, projected, downwardAPI, or one of
   exactly four hostPaths: the model's own configuration folder `<compile root>/<namespace>/<16 hex>` (writable),
   the agent's markers `<compile root>/.warmstart` and the weights root (read-only in every container), and the
   pod-records root (only as `subPathExpr: $(POD_UID)`, in a container whose every POD_UID variable is the downward
   API's `metadata.uid`); no privileged container, no added capability, no host namespaces or host ports. Such a
   namespace must allow hostPath (Pod Security `privileged`), so the policy keeps the rest of Pod Security baseline
   there: seccomp, AppArmor, SELinux, procMount and sysctls (node_agent/baseline_rules.py).
2. **Everywhere else**, a writable mount of a hostPath that is one of the warmstart folders or lies inside one is
   refused unless it is the namespace's own compile folder (the pod-records root is mounted only in a model's
   namespace), and so is a writable hostPath not written in canonical form (relative, or with `//`, `/./`, a
   trailing `/.`) or through a /proc link (`/proc/<pid>/root`, `cwd`, `fd`, `map_files`), which the prefix check
   could not see through. A mount of a folder that holds a root (`/`, `/mnt`, a /proc process folder), read-only or
   not, is admitted only in a container that cannot become root, in one that is the node's root anyway
   (privileged, CAP_SYS_ADMIN: `kubectl debug node --profile=sysadmin`, the GPU Operator), or in a namespace the
   config trusts to read the node as root: `readOnly` leaves the NVMe array's own mount below writable, and
   `recursiveReadOnly` leaves the container runtime's socket reachable (docs/trust-model.md).
3. **In the agent's namespace** (`warmstart-system`, Pod Security `privileged`: the agent mounts the roots
   themselves), only the agent's service account mounts host folders, and only those its DaemonSet renders; no pod
   there is privileged, adds a capability, shares a host namespace or binds a host port.
Kubernetes CEL provides the strings extension; no optional types are used (valid on every supported minor).
"""

from __future__ import annotations

import re

from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.agent_settings import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT
from contracts.host_paths import PROC_HOLDS_LINKS, PROC_LINK, ROOT_CAPABILITIES, with_aliases
from contracts.node_layout import AGENT_STATE_FOLDER
from contracts.pod_labels import model_labels
from kube.admission import deny_policy
from node_agent.baseline_rules import CONTAINER_LISTS as _CONTAINER_LISTS
from node_agent.baseline_rules import baseline_rules

POLICY_NAME = "warmstart-host-paths"
POD_UID_VARIABLE = "POD_UID"
_PLAIN_VOLUMES = ("emptyDir", "configMap", "secret", "projected", "downwardAPI")


_THROUGH_PROC = f"h.raw.matches('{PROC_LINK}') || h.raw.matches('{PROC_HOLDS_LINKS}')"
_CANONICAL = "h.raw.startsWith('/') && !h.raw.contains('//') && !h.raw.contains('/./') && !h.raw.endsWith('/.')"


def _cel_regex(path: str) -> str:
    """A literal path as a regular expression inside a CEL string literal (where a backslash is written twice)."""
    return re.escape(path.rstrip("/")).replace("\\", "\\\\")


def _label_is(key: str, value: str) -> str:
    labels = "namespaceObject.metadata.labels"
    return f"(has(namespaceObject.metadata.labels) && '{key}' in {labels} && {labels}['{key}'] == '{value}')"


def _own_uid(container: str) -> str:
    return (
        f"has({container}.env) && {container}.env.exists(e, e.name == '{POD_UID_VARIABLE}') && "
        f"{container}.env.filter(e, e.name == '{POD_UID_VARIABLE}').all(e, has(e.valueFrom) && "
        "has(e.valueFrom.fieldRef) && e.valueFrom.fieldRef.fieldPath == 'metadata.uid')"
    )


def _own_records_mount(records_root: str) -> str:
    """The mount `m` (of container `c`) of volume `h` is the pod's own record folder."""
    return (
        f"h.path == '{records_root.rstrip('/')}/' && has(m.subPathExpr) && "
        f"m.subPathExpr == '$({POD_UID_VARIABLE})' && !has(m.subPath) && {_own_uid('c')}"
    )


def _model_namespace_rules(compile_root: str, weights_root: str | None, records_root: str) -> list[k8s.Validation]:
    compile_folder = "'^" + _cel_regex(compile_root) + "/' + request.namespace + '/[0-9a-f]{16}$'"
    state = f"{compile_root.rstrip('/')}/{AGENT_STATE_FOLDER}"
    read_only = [state, *([weights_root.rstrip("/")] if weights_root else [])]
    plain = " || ".join(f"has(v.{kind})" for kind in _PLAIN_VOLUMES)
    allowed_paths = repr([*read_only, records_root.rstrip("/")])
    volumes = (
        "!variables.inModelNamespace || !has(object.spec.volumes) || object.spec.volumes.all(v, "
        f"{plain} || (has(v.hostPath) && (v.hostPath.path.matches({compile_folder}) || "
        f"v.hostPath.path in {allowed_paths})))"
    )
    rules = [
        k8s.Validation(
            expression=volumes,
            message="a pod of a model's namespace may use only the volumes warmstart renders: emptyDir, configMap, "
            "secret, projected, downwardAPI, and the hostPaths of its own compile folder, the agent's markers, the "
            "weights copies and its own record folder",
        ),
        k8s.Validation(
            expression="!variables.inWarmstartNamespace || !("
            + " || ".join(
                f"(has(object.spec.{field}) && object.spec.{field})" for field in ("hostPID", "hostIPC", "hostNetwork")
            )
            + ")",
            message="a pod of a model's namespace or of warmstart-system may not share the node's process, IPC or "
            "network namespaces",
        ),
    ]
    for name in _CONTAINER_LISTS:
        mounts = (
            f"!variables.inModelNamespace || !has(object.spec.{name}) || object.spec.{name}.all(c, "
            "!has(c.volumeMounts) || c.volumeMounts.all(m, variables.hostVolumes.all(h, h.name != m.name || "
            f"h.raw.matches({compile_folder}) || "
            f"(h.raw in {repr(read_only)} && has(m.readOnly) && m.readOnly) || ({_own_records_mount(records_root)}))))"
        )
        escalation = (
            f"!variables.inWarmstartNamespace || !has(object.spec.{name}) || object.spec.{name}.all(c, "
            "!(has(c.securityContext) && ((has(c.securityContext.privileged) && c.securityContext.privileged) || "
            "(has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) && "
            "size(c.securityContext.capabilities.add) > 0))) && "
            "(!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)))"
        )
        rules += [
            k8s.Validation(
                expression=mounts,
                message=f"{name}: in a model's namespace the markers and the weights are mounted read-only and the "
                f"records root only as the pod's own folder (subPathExpr $({POD_UID_VARIABLE}) from metadata.uid)",
            ),
            k8s.Validation(
                expression=escalation,
                message=f"{name}: in a model's namespace or warmstart-system no container is privileged, adds a "
                "capability or binds a host port",
            ),
        ]
    return rules


def _elsewhere_writable_rule(list_name: str, compile_root: str) -> k8s.Validation:
    """Outside warmstart's namespaces: a writable mount of a warmstart folder (or of a folder inside one) only as the
    namespace's compile folder, and no writable hostPath in a non-canonical form or through a /proc link (which the
    prefix check could not see through). The pod-records root is mounted only where warmstart renders it (a model's
    namespace). A mount of a folder that CONTAINS a root is the next rule's."""
    compile_folder = "'^" + _cel_regex(compile_root) + "/' + request.namespace + '/[0-9a-f]{16}/$'"
    expression = (
        "variables.inModelNamespace || variables.inAgentNamespace || "
        f"!has(object.spec.{list_name}) || object.spec.{list_name}.all(c, "
        "!has(c.volumeMounts) || c.volumeMounts.all(m, (has(m.readOnly) && m.readOnly) || "
        f"variables.hostVolumes.all(h, h.name != m.name || ({_CANONICAL} && "
        f"!h.raw.matches('{PROC_LINK}') && "
        f"(!variables.roots.exists(r, h.path.startsWith(r)) || h.path.matches({compile_folder}))))))"
    )
    return k8s.Validation(
        expression=expression,
        message=f"{list_name}: a writable hostPath must be canonical (absolute, no '//' or '/./'), may not go through "
        "a /proc link (/proc/<pid>/root, cwd, fd, map_files) and may reach into a warmstart node folder only as the "
        "namespace's own compile folder (the pod-records root is mounted only in a model's namespace); mount it "
        "readOnly otherwise",
    )


def _cannot_become_root(container: str) -> str:
    """The container runs as a user other than root (by its runAsUser, else the pod's, else runAsNonRoot, which
    kubelet checks against the image's user) and cannot gain root (allowPrivilegeEscalation false: no setuid
    binary, no file capability, of its image or of the node's folders it mounts; never privileged)."""
    own, pod = f"{container}.securityContext", "object.spec.securityContext"
    pod_user = f"(has({pod}) && has({pod}.runAsUser))"
    pod_non_root = f"(has({pod}) && has({pod}.runAsNonRoot) && {pod}.runAsNonRoot)"
    return (
        f"has({own}) && has({own}.allowPrivilegeEscalation) && !{own}.allowPrivilegeEscalation && "
        f"!(has({own}.privileged) && {own}.privileged) && "
        f"(has({own}.runAsUser) ? {own}.runAsUser != 0 : {pod_user} ? {pod}.runAsUser != 0 : "
        f"has({own}.runAsNonRoot) ? {own}.runAsNonRoot : {pod_non_root})"
    )


def _node_root_already(container: str) -> str:
    """A privileged container, or one given CAP_SYS_ADMIN, can mount the array itself (the GPU Operator's device
    plugin, security agents): refusing it a read-only mount would protect nothing. Who may run one is Pod
    Security's business."""
    own = f"{container}.securityContext"
    return (
        f"(has({own}) && ((has({own}.privileged) && {own}.privileged) || (has({own}.capabilities) && "
        f"has({own}.capabilities.add) && {own}.capabilities.add.exists(a, a in {list(ROOT_CAPABILITIES)!r}))))"
    )


def _elsewhere_parent_rule(list_name: str) -> k8s.Validation:
    """Outside warmstart's namespaces: a hostPath that holds a warmstart root (`/`, `/mnt`, the array's parent),
    reaches it through /proc, or is not written canonically gives a root process the node's folders, read-only or
    not. `readOnly` binds only the top mount, so the array below stays writable; `recursiveReadOnly` closes the
    writes but not a connect to the container runtime's socket below (`/run`), which starts a privileged container
    (tests/hostile/mount_shape.py shows both on a real kernel). So such a mount is admitted only in a container that
    cannot become root (non-root user, no privilege escalation: warmstart's folders are root-owned and not group- or
    world-writable), in one that is the node's root anyway (privileged, CAP_SYS_ADMIN: it could mount the array
    itself), or in a namespace the config trusts to read the node as root (cluster.trusted_node_readers)."""
    expression = (
        "variables.inModelNamespace || variables.inAgentNamespace || variables.trustedReader || "
        f"!has(object.spec.{list_name}) || object.spec.{list_name}.all(c, {_node_root_already('c')} || "
        f"({_cannot_become_root('c')}) || !has(c.volumeMounts) || "
        "c.volumeMounts.all(m, !(m.name in variables.exposing)))"
    )
    return k8s.Validation(
        expression=expression,
        message=f"{list_name}: a hostPath that holds warmstart's node folders (such as '/' or '/mnt', a /proc "
        "process folder or link, or a non-canonical path) gives a root process the NVMe caches, read-only or not: run "
        "the container as a non-root user (runAsUser or runAsNonRoot) with allowPrivilegeEscalation: false, or, for "
        "a node agent the cluster trusts, list its namespace in warmstart's cluster.trusted_node_readers (a "
        "privileged container, such as kubectl debug --profile=sysadmin, is the node's root anyway and admitted)",
    )


def _agent_namespace_rule(agent_host_paths: list[str]) -> k8s.Validation:
    return k8s.Validation(
        expression="!variables.inAgentNamespace || !has(object.spec.volumes) || object.spec.volumes.all(v, "
        f"!has(v.hostPath) || (v.hostPath.path in {sorted(agent_host_paths)!r} && "
        f"has(object.spec.serviceAccountName) && object.spec.serviceAccountName == '{AGENT_SERVICE_ACCOUNT}'))",
        message=f"in {AGENT_NAMESPACE} only the node agent ({AGENT_SERVICE_ACCOUNT}) mounts host folders, and only "
        "those its DaemonSet renders: " + ", ".join(sorted(agent_host_paths)),
    )


def _variables(roots: list[str], trusted_readers: list[str]) -> list[k8s.Variable]:
    """Where the pod is (the agent's namespace, a model's), and its host volumes, canonical with a final '/'."""
    namespace_labels = {k: v for k, v in model_labels("").items() if v}
    return [
        # The agent's own DaemonSet mounts the roots themselves (it is what reads and keeps them); its
        # namespace may mount exactly those host folders and no other.
        k8s.Variable(name="inAgentNamespace", expression=f"request.namespace == '{AGENT_NAMESPACE}'"),
        k8s.Variable(name="roots", expression=repr(roots)),
        # Namespaces the cluster trusts to read the node's root as root (config: cluster.trusted_node_readers).
        k8s.Variable(name="trustedReader", expression=f"request.namespace in {sorted(trusted_readers)!r}"),
        k8s.Variable(
            name="inModelNamespace",
            expression=" && ".join(_label_is(k, v) for k, v in sorted(namespace_labels.items())),
        ),
        k8s.Variable(
            name="inWarmstartNamespace",
            expression="variables.inModelNamespace || variables.inAgentNamespace",
        ),
        k8s.Variable(
            name="hostVolumes",
            expression=(
                "has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.hostPath)).map(v, "
                "{'name': v.name, 'raw': v.hostPath.path, 'path': v.hostPath.path.endsWith('/') ? "
                "v.hostPath.path : v.hostPath.path + '/'}) : []"
            ),
        ),
        # The host volumes (by name) that give a root process the warmstart roots, read-only or not: they hold a
        # root, go through /proc (whose links reach the node's root whatever the mount's flags), or are not written
        # canonically (the prefix check cannot see where they lead).
        k8s.Variable(
            name="exposing",
            expression=(
                f"variables.hostVolumes.filter(h, {_THROUGH_PROC} || !({_CANONICAL}) || "
                "variables.roots.exists(r, r != h.path && r.startsWith(h.path))).map(h, h.name)"
            ),
        ),
    ]


def host_path_policy(
    scope: Construct,
    *,
    compile_root: str,
    weights_root: str | None,
    records_root: str,
    agent_host_paths: list[str],
    labels: dict[str, str],
    trusted_readers: list[str] | None = None,
) -> tuple[k8s.KubeValidatingAdmissionPolicy, k8s.KubeValidatingAdmissionPolicyBinding]:
    roots = with_aliases([root.rstrip("/") + "/" for root in (compile_root, weights_root, records_root) if root])
    return deny_policy(
        scope,
        "HostPaths",
        name=POLICY_NAME,
        labels=labels,
        # A pod's volumes and containers are fixed once it is created; only its ephemeral containers are added by
        # an update. Checking every pod update would strand pods created before the policy (a label or finalizer
        # change refused: a pod that never finishes terminating).
        operations=["CREATE"],
        resources=["pods"],
        more_rules=[(["UPDATE"], ["pods/ephemeralcontainers"])],
        variables=_variables(roots, trusted_readers or []),
        validations=[
            _agent_namespace_rule(agent_host_paths),
            *_model_namespace_rules(compile_root, weights_root, records_root),
            *(_elsewhere_writable_rule(name, compile_root) for name in _CONTAINER_LISTS),
            *(_elsewhere_parent_rule(name) for name in _CONTAINER_LISTS),
            *baseline_rules("variables.inModelNamespace"),
        ],
    )
