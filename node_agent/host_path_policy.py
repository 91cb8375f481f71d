"""Admission: no pod writes the agent's inputs on a node except through the mounts warmstart renders.

The agent trusts a pod's record only for that pod (its folder is named by kubelet after the pod's UID), a compile
folder only for the model whose namespace mounts it, and the weights copies because no pod can write them. Those
promises hold only if no pod mounts the warmstart folders otherwise, so a ValidatingAdmissionPolicy on every pod
(every namespace but the agent's own) refuses a writable mount of any hostPath that is one of the warmstart
folders (the compile-cache, weights and pod-records roots), lies inside one, or contains one (`/`, the NVMe mount),
unless it is exactly one of:
- `<compile root>/<the pod's namespace>/<16 hex>`: a model's configuration folder, for that model's pods only
  (a model's namespace is its name);
- `<records root>` mounted with `subPathExpr: $(POD_UID)` in a container whose every POD_UID variable is the
  downward API's `metadata.uid`: the pod's own record folder.
Read-only mounts are left to Pod Security (a read cannot forge anything the agent believes). A path is compared in
its canonical form (doubled slashes and `/./` folded), so `/mnt//k8s-disks/0/warmstart/pods` is caught too; `..`
is refused by the API server itself. Kubernetes CEL's `replace` is the strings extension's (every occurrence).
"""

from __future__ import annotations

import re

from cdk8s_plus_33 import k8s
from constructs import Construct

from warmstart.agent_settings import AGENT_NAMESPACE

POLICY_NAME = "warmstart-host-paths"
POD_UID_VARIABLE = "POD_UID"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_CANONICAL = "(v.hostPath.path + '/')" + ".replace('//', '/')" * 4 + ".replace('/./', '/')" * 2


def _mount_allowed(list_name: str, compile_root: str, records_root: str) -> str:
    """Every mount of the list is read-only, of a volume that touches no warmstart folder, or an allowed form."""
    # The folder as a regular expression, inside a CEL string literal (where a backslash is written twice).
    folder = re.escape(compile_root.rstrip("/")).replace("\\", "\\\\")
    compile_pattern = "'^" + folder + "/' + request.namespace + '/[0-9a-f]{16}/$'"
    own_uid = (
        f"has(c.env) && c.env.exists(e, e.name == '{POD_UID_VARIABLE}') && "
        f"c.env.filter(e, e.name == '{POD_UID_VARIABLE}').all(e, has(e.valueFrom) && has(e.valueFrom.fieldRef) && "
        "e.valueFrom.fieldRef.fieldPath == 'metadata.uid')"
    )
    allowed_form = (
        f"h.path.matches({compile_pattern}) || "
        f"(h.path == '{records_root.rstrip('/')}/' && has(m.subPathExpr) && m.subPathExpr == '$({POD_UID_VARIABLE})' "
        f"&& !has(m.subPath) && {own_uid})"
    )
    return (
        f"!has(object.spec.{list_name}) || object.spec.{list_name}.all(c, !has(c.volumeMounts) || "
        "c.volumeMounts.all(m, (has(m.readOnly) && m.readOnly) || "
        "!variables.touching.exists(h, h.name == m.name) || "
        f"variables.touching.exists(h, h.name == m.name && ({allowed_form}))))"
    )


def host_path_policy(
    scope: Construct, *, compile_root: str, weights_root: str | None, records_root: str, labels: dict[str, str]
) -> tuple[k8s.KubeValidatingAdmissionPolicy, k8s.KubeValidatingAdmissionPolicyBinding]:
    roots = [root.rstrip("/") + "/" for root in (compile_root, weights_root, records_root) if root]
    policy = k8s.KubeValidatingAdmissionPolicy(
        scope,
        "HostPaths",
        metadata=k8s.ObjectMeta(name=POLICY_NAME, labels=labels),
        spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(
                resource_rules=[
                    k8s.NamedRuleWithOperations(
                        api_groups=[""],
                        api_versions=["v1"],
                        operations=["CREATE", "UPDATE"],
                        resources=["pods", "pods/ephemeralcontainers"],
                    )
                ]
            ),
            match_conditions=[
                # The agent's own DaemonSet mounts the roots themselves (it is what reads and keeps them).
                k8s.MatchCondition(
                    name="not-the-agents-namespace", expression=f"request.namespace != '{AGENT_NAMESPACE}'"
                )
            ],
            variables=[
                k8s.Variable(name="roots", expression=repr(roots)),
                k8s.Variable(
                    name="hostVolumes",
                    expression=(
                        "has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.hostPath))"
                        f".map(v, {{'name': v.name, 'path': {_CANONICAL}}}) : []"
                    ),
                ),
                k8s.Variable(
                    name="touching",
                    expression=(
                        "variables.hostVolumes.filter(h, variables.roots.exists(r, h.path.startsWith(r) || "
                        "r.startsWith(h.path)))"
                    ),
                ),
            ],
            validations=[
                k8s.Validation(
                    expression=_mount_allowed(name, compile_root, records_root),
                    message=(
                        f"a writable mount ({name}) of a warmstart node folder ({', '.join(roots)}, or a folder that "
                        "holds one) must be a warmstart-rendered one: the model's own compile folder "
                        f"<compile root>/<namespace>/<fingerprint>, or the pod-records root with subPathExpr "
                        f"$({POD_UID_VARIABLE}) from metadata.uid; mount it readOnly otherwise"
                    ),
                )
                for name in _CONTAINER_LISTS
            ],
        ),
    )
    binding = k8s.KubeValidatingAdmissionPolicyBinding(
        scope,
        "HostPathsBinding",
        metadata=k8s.ObjectMeta(name=POLICY_NAME, labels=labels),
        spec=k8s.ValidatingAdmissionPolicyBindingSpec(policy_name=POLICY_NAME, validation_actions=["Deny"]),
    )
    binding.add_dependency(policy)
    return policy, binding
