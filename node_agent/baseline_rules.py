"""The part of Pod Security `baseline` a model's namespace keeps, though it must be `privileged` (its pods mount
hostPaths, which `baseline` forbids): the rules of pod-security-admission v0.35 (`policy/check_*.go`, the baseline
level) for seccomp, AppArmor, SELinux, /proc masking and sysctls, as CEL validations of the host-path policy.

Without them a pod of a model's namespace could run unconfined (seccomp or AppArmor `Unconfined`, SELinux
`spc_t`: on Bottlerocket SELinux is the node's confinement of containers), see the node's /proc unmasked, or set a
kernel parameter for the whole node. The pods warmstart renders set none of these (seccomp RuntimeDefault).
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

# pod-security-admission v0.35.6, policy/check_seLinuxOptions.go: the types baseline allows (the empty type too).
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# policy/check_sysctls.go, the newest released set (v1.32 and later).
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _confined(context: str) -> str:
    """`context` (a pod's or a container's securityContext, which exists) keeps seccomp, AppArmor and SELinux."""
    return (
        f"(!has({context}.seccompProfile) || {context}.seccompProfile.type != 'Unconfined') && "
        f"(!has({context}.appArmorProfile) || {context}.appArmorProfile.type != 'Unconfined') && "
        f"(!has({context}.seLinuxOptions) || ((!has({context}.seLinuxOptions.type) || "
        f"{context}.seLinuxOptions.type in {list(SELINUX_TYPES)!r}) && "
        f"(!has({context}.seLinuxOptions.user) || {context}.seLinuxOptions.user == '') && "
        f"(!has({context}.seLinuxOptions.role) || {context}.seLinuxOptions.role == '')))"
    )


def baseline_rules(in_scope: str) -> list[k8s.Validation]:
    """Validations that hold wherever the CEL expression `in_scope` is true."""
    pod = "object.spec.securityContext"
    rules = [
        k8s.Validation(
            expression=f"!{in_scope} || !has({pod}) || ({_confined(pod)} && (!has({pod}.sysctls) || "
            f"{pod}.sysctls.all(s, s.name in {list(SAFE_SYSCTLS)!r})))",
            message="in a model's namespace a pod keeps Pod Security baseline's confinement: no seccomp or AppArmor "
            f"Unconfined, SELinux type one of {', '.join(t for t in SELINUX_TYPES if t)} with no user or role, and "
            "only the sysctls baseline calls safe",
        ),
        k8s.Validation(
            expression=f"!{in_scope} || !has(object.metadata.annotations) || object.metadata.annotations.all(k, "
            f"!k.startsWith('{APPARMOR_ANNOTATION}') || object.metadata.annotations[k] in ['', 'runtime/default'] "
            "|| object.metadata.annotations[k].startsWith('localhost/'))",
            message="in a model's namespace an AppArmor annotation is runtime/default or localhost/<profile>",
        ),
    ]
    for name in CONTAINER_LISTS:
        context = "c.securityContext"
        rules.append(
            k8s.Validation(
                expression=f"!{in_scope} || !has(object.spec.{name}) || object.spec.{name}.all(c, "
                f"!has({context}) || ({_confined(context)} && "
                f"(!has({context}.procMount) || {context}.procMount == 'Default')))",
                message=f"{name}: in a model's namespace a container keeps Pod Security baseline's confinement: no "
                "seccomp or AppArmor Unconfined, a baseline SELinux type with no user or role, procMount Default",
            )
        )
    return rules
