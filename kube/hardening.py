"""What every warmstart pod runs with: no privilege escalation, no capabilities, the runtime's default seccomp
profile, and (where the image allows) a read-only root and a non-root user. What a pod must keep (root, a
writable root, host paths) is stated where scanners read it: KubeLinter's `ignore-check.kube-linter.io/<check>`
and Checkov's `checkov.io/skip<n>: <check>=<reason>` annotations on the workload object."""

from __future__ import annotations

from dataclasses import dataclass

from cdk8s_plus_33 import k8s

from warmstart.workload import SHARED_SELINUX_LEVEL

NOBODY = 65534  # the unprivileged user of most base images


def pod_security(*, selinux_level: str | None = SHARED_SELINUX_LEVEL) -> k8s.PodSecurityContext:
    return k8s.PodSecurityContext(
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        se_linux_options=k8s.SeLinuxOptions(level=selinux_level) if selinux_level else None,
    )


def isolated_pod_spec(**fields) -> k8s.PodSpec:
    """A pod spec whose containers get only the environment they declare: no service links. kubelet otherwise
    adds `<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT=tcp://<ip>:<port>` and more for every Service of the pod's
    namespace (pkg/kubelet/envvars/envvars.go), so a Service named after a program's own variable prefix
    (`vllm` -> VLLM_PORT, `warmstart` -> WARMSTART_...) sets that program's settings; vLLM 0.21.0 refuses a
    VLLM_PORT that is a URI and every pod created after the Service crashes. The API server's own
    KUBERNETES_SERVICE_* variables stay (kubelet adds them whatever this field says)."""
    return k8s.PodSpec(enable_service_links=False, **fields)


def locked_down(*, read_only_root: bool, run_as_user: int | None = NOBODY) -> k8s.SecurityContext:
    """`run_as_user=None`: the image's own user; 0: root. Either needs a Departure that says why."""
    return k8s.SecurityContext(
        allow_privilege_escalation=False,
        capabilities=k8s.Capabilities(drop=["ALL"]),
        read_only_root_filesystem=read_only_root,
        run_as_non_root=True if run_as_user else None,
        run_as_user=run_as_user,
    )


@dataclass(frozen=True)
class Departure:
    """One deliberate departure from what scanners expect, with its reason: the KubeLinter check it departs
    from (None where KubeLinter has none) and the Checkov check ids."""

    kube_linter: str | None
    checkov: tuple[str, ...]
    reason: str


RUNS_AS_ROOT = ("run-as-non-root", ("CKV_K8S_23", "CKV_K8S_40"))  # root; a high UID
WRITABLE_ROOT = ("no-read-only-root-fs", ("CKV_K8S_22",))
NO_LIVENESS = ("no-liveness-probe", ("CKV_K8S_8",))
NO_READINESS = ("no-readiness-probe", ("CKV_K8S_9",))
NEEDS_API_TOKEN = (None, ("CKV_K8S_38",))
NO_CPU_LIMIT = ("unset-cpu-requirements", ("CKV_K8S_11",))
PULL_IF_NOT_PRESENT = (None, ("CKV_K8S_15",))


def departure(check: tuple[str | None, tuple[str, ...]], reason: str) -> Departure:
    return Departure(check[0], check[1], reason)


# What every warmstart workload departs from, and why.
CPU_REQUEST_ONLY = departure(
    NO_CPU_LIMIT,
    "CPU is requested (reserved for it); a CFS quota would only throttle "
    "the weight streaming and download threads in bursts",
)
PINNED_IMAGES = departure(
    PULL_IF_NOT_PRESENT,
    "images are pinned (floating tags are refused at synth) and pulled "
    "once per node: IfNotPresent is what the image pre-pull relies on",
)


def scanner_annotations(departures: list[Departure], host_paths: str | None = None) -> dict[str, str]:
    """The departures of one workload (and the ones every workload shares) as KubeLinter and Checkov read them."""
    every = [*departures, CPU_REQUEST_ONLY, PINNED_IMAGES]
    annotations = {f"ignore-check.kube-linter.io/{item.kube_linter}": item.reason for item in every if item.kube_linter}
    skips = [f"{check}={item.reason}" for item in every for check in item.checkov]
    annotations.update({f"checkov.io/skip{index}": skip for index, skip in enumerate(skips, start=1)})
    if host_paths:
        annotations["warmstart.io/host-paths"] = host_paths
    return annotations
