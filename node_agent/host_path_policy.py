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
   namespace must allow hostPath (Pod Security `privileged`), so this is the part of Pod Security baseline that
   keeps a pod there from reaching the node in any other way.
2. **Everywhere else**, a writable mount of a hostPath that is one of the warmstart folders or lies inside one is
   refused unless it is the namespace's own compile folder or the pod's own record folder in the rendered forms,
   and so is a writable hostPath not written in canonical form (relative, or with `//`, `/./`, a trailing `/.`),
   which the prefix check could not see through. A writable mount of a folder that contains a root (`/`, `/mnt`:
   `kubectl debug node`, CNIs and node agents in kube-system) and read-only mounts are the cluster's Pod Security
   to govern: a pod free to mount such a folder is the node's root whatever this policy says (docs/trust-model.md).
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
from contracts.node_layout import AGENT_STATE_FOLDER
from contracts.pod_labels import model_labels
from kube.admission import deny_policy

POLICY_NAME = "warmstart-host-paths"
POD_UID_VARIABLE = "POD_UID"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_PLAIN_VOLUMES = ("emptyDir", "configMap", "secret", "projected", "downwardAPI")


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


def _elsewhere_rule(list_name: str, compile_root: str, records_root: str) -> k8s.Validation:
    """Outside warmstart's namespaces: a writable mount of a warmstart folder (or of a folder inside one) only in the
    rendered forms, and no writable hostPath in a non-canonical form (which the prefix check could not see). A
    writable mount of a folder that CONTAINS a root (`/`, `/mnt`: `kubectl debug node`, node agents) is Pod
    Security's business: such a pod is root on the node whatever this policy says."""
    compile_folder = "'^" + _cel_regex(compile_root) + "/' + request.namespace + '/[0-9a-f]{16}/$'"
    allowed = f"h.path.matches({compile_folder}) || ({_own_records_mount(records_root)})"
    expression = (
        "variables.inModelNamespace || variables.inAgentNamespace || "
        f"!has(object.spec.{list_name}) || object.spec.{list_name}.all(c, "
        "!has(c.volumeMounts) || c.volumeMounts.all(m, (has(m.readOnly) && m.readOnly) || "
        "variables.hostVolumes.all(h, h.name != m.name || ("
        "h.raw.startsWith('/') && !h.raw.contains('//') && !h.raw.contains('/./') && !h.raw.endsWith('/.') && "
        f"(!variables.roots.exists(r, h.path.startsWith(r)) || {allowed})))))"
    )
    return k8s.Validation(
        expression=expression,
        message=f"{list_name}: a writable hostPath must be canonical (absolute, no '//' or '/./') and may reach into a "
        "warmstart node folder only as warmstart renders it: the model's own compile folder, or the pod-records root "
        f"by subPathExpr $({POD_UID_VARIABLE}) from metadata.uid; mount it readOnly otherwise",
    )


def _agent_namespace_rule(agent_host_paths: list[str]) -> k8s.Validation:
    return k8s.Validation(
        expression="!variables.inAgentNamespace || !has(object.spec.volumes) || object.spec.volumes.all(v, "
        f"!has(v.hostPath) || (v.hostPath.path in {sorted(agent_host_paths)!r} && "
        f"has(object.spec.serviceAccountName) && object.spec.serviceAccountName == '{AGENT_SERVICE_ACCOUNT}'))",
        message=f"in {AGENT_NAMESPACE} only the node agent ({AGENT_SERVICE_ACCOUNT}) mounts host folders, and only "
        "those its DaemonSet renders: " + ", ".join(sorted(agent_host_paths)),
    )


def _variables(roots: list[str]) -> list[k8s.Variable]:
    """Where the pod is (the agent's namespace, a model's), and its host volumes, canonical with a final '/'."""
    namespace_labels = {k: v for k, v in model_labels("").items() if v}
    return [
        # The agent's own DaemonSet mounts the roots themselves (it is what reads and keeps them); its
        # namespace may mount exactly those host folders and no other.
        k8s.Variable(name="inAgentNamespace", expression=f"request.namespace == '{AGENT_NAMESPACE}'"),
        k8s.Variable(name="roots", expression=repr(roots)),
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
    ]


def host_path_policy(
    scope: Construct,
    *,
    compile_root: str,
    weights_root: str | None,
    records_root: str,
    agent_host_paths: list[str],
    labels: dict[str, str],
) -> tuple[k8s.KubeValidatingAdmissionPolicy, k8s.KubeValidatingAdmissionPolicyBinding]:
    roots = [root.rstrip("/") + "/" for root in (compile_root, weights_root, records_root) if root]
    return deny_policy(
        scope,
        "HostPaths",
        name=POLICY_NAME,
        labels=labels,
        operations=["CREATE", "UPDATE"],
        resources=["pods", "pods/ephemeralcontainers"],
        variables=_variables(roots),
        validations=[
            _agent_namespace_rule(agent_host_paths),
            *_model_namespace_rules(compile_root, weights_root, records_root),
            *(_elsewhere_rule(name, compile_root, records_root) for name in _CONTAINER_LISTS),
        ],
    )
