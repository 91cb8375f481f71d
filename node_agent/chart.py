"""The node agent on every GPU node: DaemonSet, its settings, and permissions limited to its own node.

RBAC cannot name "the node I run on", so a ValidatingAdmissionPolicy adds that: the agent's service
account may change only the node its token was issued for (the node-name claim Kubernetes puts in
bound service-account tokens), and only labels under warmstart.io.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.agent_settings import (
    AGENT_CACHE_MOUNT,
    AGENT_MEMORY_GIB,
    AGENT_NAMESPACE,
    AGENT_POD_LOGS_MOUNT,
    AGENT_PODS_MOUNT,
    AGENT_SERVICE_ACCOUNT,
    AGENT_WEIGHTS_MOUNT,
    LABEL_DOMAINS,
    POD_LOGS_HOST_PATH,
    AgentSettings,
)
from contracts.pod_labels import gpu_pool_selector
from contracts.start_record import starts_config_map_name
from kube.admission import deny_policy
from kube.gpu_nodes import pool_k8s_tolerations
from kube.hardening import (
    NEEDS_API_TOKEN,
    RUNS_AS_ROOT,
    departure,
    isolated_pod_spec,
    locked_down,
    pod_security,
    scanner_annotations,
)
from kube.scraping import scrape_annotations
from node_agent.host_path_policy import host_path_policy

SETTINGS_FILE = "agent.json"
# Touched every 20 s while none of the agent's loops is stuck (runtime/liveness.py: a loop is stuck after its
# period plus 10 minutes without progress); liveness fails when it is older than this.
HEARTBEAT_FILE = "/tmp/warmstart-agent-alive"
HEARTBEAT_MAX_AGE_SECONDS = 120
# Written by the agent once its start-up (every model's compile-cache restore) is done (runtime/__main__.py).
READY_FILE = "/tmp/warmstart-agent-ready"
AGENT_ANNOTATIONS = scanner_annotations(
    [
        departure(
            RUNS_AS_ROOT,
            "it creates and renames folders on root-owned node host paths (the caches the pods "
            "mount); no capabilities, no privilege escalation, read-only root, seccomp "
            "RuntimeDefault",
        ),
        departure(
            NEEDS_API_TOKEN,
            "it reads the pods of its node and labels its node through the Kubernetes API "
            "(an admission policy limits it to its own node's warmstart labels)",
        ),
    ],
    host_paths="the node's compile cache, weights copies and the vLLM pods' entry records, which it fills and cleans; "
    "kubelet's pod logs, read-only, to time each vLLM start from vLLM's own lines",
)
SETTINGS_MOUNT = "/etc/warmstart"
AGENT_USER = f"system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_SERVICE_ACCOUNT}"
LABELS = {"app.kubernetes.io/name": "warmstart-agent", "app.kubernetes.io/part-of": "warmstart"}
OWN_STARTS_POLICY = "warmstart-agent-own-starts-only"


# CEL (Kubernetes 1.30+, no optional types): labels outside the agent's own domains unchanged, exact prefixes
# (not "contains": evil.warmstart.io.example/x would pass that), and nothing else of the node changed.
_OURS = "variables.ours.exists(p, k.startsWith(p))"
_OTHER_LABELS_UNCHANGED = (
    f"variables.oldLabels.all(k, {_OURS} || "
    "(k in variables.newLabels && variables.newLabels[k] == variables.oldLabels[k])) && "
    f"variables.newLabels.all(k, {_OURS} || k in variables.oldLabels)"
)


def meta(name: str) -> k8s.ObjectMeta:
    """An object of the agent's namespace, with the agent's labels."""
    return k8s.ObjectMeta(name=name, namespace=AGENT_NAMESPACE, labels=LABELS)


def _unchanged(field: str, empty: str) -> str:
    """metadata.<field> equal before and after, an absent field counting as empty."""
    return (
        f"(has(object.metadata.{field}) ? object.metadata.{field} : {empty}) == "
        f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {empty})"
    )


@dataclass(frozen=True)
class NodeFolders:
    """The node's folders the agent fills (host paths): compile caches, weights copies (when a model caches its
    weights), the vLLM pods' entry records."""

    cache_root: str
    weights_root: str
    pod_records_root: str
    # Namespaces trusted to read the node's root above them as root (the config's cluster.trusted_node_readers).
    trusted_readers: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricsScrapers:
    """Who may scrape the agent's metrics port: address blocks and namespaces."""

    cidrs: list[str]
    namespaces: list[str]


_IS_THE_AGENT = k8s.MatchCondition(name="is-warmstart-agent", expression=f"request.userInfo.username == '{AGENT_USER}'")


def _own_node_validations() -> list[k8s.Validation]:
    """What the agent may change of a node: only its own node, only its own labels, nothing else."""
    return [
        # The node-name claim of bound service-account tokens (on by default since Kubernetes 1.30).
        k8s.Validation(
            expression=(
                "has(request.userInfo.extra) && "
                "'authentication.kubernetes.io/node-name' in request.userInfo.extra && "
                "request.userInfo.extra['authentication.kubernetes.io/node-name'][0] "
                "== object.metadata.name"
            ),
            message="the warmstart agent may change only the node it runs on",
        ),
        k8s.Validation(
            expression=_OTHER_LABELS_UNCHANGED,
            message="the warmstart agent may change only its own warmstart.io labels",
        ),
        k8s.Validation(
            expression=" && ".join(
                [
                    _unchanged("annotations", "{}"),
                    _unchanged("finalizers", "[]"),
                    _unchanged("ownerReferences", "[]"),
                ]
            ),
            message="the warmstart agent may not change a node's annotations, finalizers or owners",
        ),
        k8s.Validation(
            expression="object.spec == oldObject.spec",
            message="the warmstart agent may not change a node's spec (taints included)",
        ),
    ]


class NodeAgentChart(cdk8s.Chart):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: AgentSettings,
        image: str,
        folders: NodeFolders,
        scrapers: MetricsScrapers,
    ) -> None:
        super().__init__(scope, id)
        settings_json = settings.model_dump_json(indent=2)
        self._rbac()
        self._metrics(settings.metrics_port, scrapers)
        self._binding_and_settings(settings_json)
        self._own_node_only()
        self._own_starts_only()
        self._daemon_set(settings, settings_json, image, folders)

    def _rbac(self) -> None:
        self.service_account = k8s.KubeServiceAccount(self, "ServiceAccount", metadata=meta(AGENT_SERVICE_ACCOUNT))
        self.cluster_role = k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=k8s.ObjectMeta(name="warmstart-agent", labels=LABELS),
            rules=[
                k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "patch"]),
                # Lists its node's pods (never reads one by name: the real API server tier found `get` unused).
                k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"]),
                # The image pull of each vLLM pod it times (kubelet's Pulling/Pulled events), read-only.
                k8s.PolicyRule(api_groups=[""], resources=["events"], verbs=["list"]),
            ],
        )
        # Its node's recent pod starts, published for `warmstart status --starts` (server-side apply: create and
        # patch), in its own namespace only.
        self.starts_role = k8s.KubeRole(
            self,
            "StartsRole",
            metadata=meta("warmstart-agent-starts"),
            rules=[k8s.PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "create", "patch"])],
        )
        self.starts_binding = k8s.KubeRoleBinding(
            self,
            "StartsRoleBinding",
            metadata=meta("warmstart-agent-starts"),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="warmstart-agent-starts"),
            subjects=[k8s.Subject(kind="ServiceAccount", name=AGENT_SERVICE_ACCOUNT, namespace=AGENT_NAMESPACE)],
        )

    def _metrics(self, port: int, scrapers: MetricsScrapers) -> None:
        scraper_cidrs, scraper_namespaces = scrapers.cidrs, scrapers.namespaces
        self.metrics_service = k8s.KubeService(
            self,
            "MetricsService",
            # No scrape annotations here: the pods carry them, and a Prometheus that honours both would scrape
            # every agent twice. The Service is for ServiceMonitors and endpoints-based jobs.
            metadata=k8s.ObjectMeta(name="warmstart-agent-metrics", namespace=AGENT_NAMESPACE, labels=LABELS),
            spec=k8s.ServiceSpec(
                cluster_ip="None",  # headless: one endpoint per node's agent, each scraped on its own
                selector=LABELS,
                ports=[
                    k8s.ServicePort(
                        name="metrics", port=port, target_port=k8s.IntOrString.from_string("metrics"), protocol="TCP"
                    )
                ],
            ),
        )
        # The namespace admits no ingress; scrapers reach the metrics port, and nothing else.
        sources = [k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=cidr)) for cidr in scraper_cidrs] + [
            k8s.NetworkPolicyPeer(
                namespace_selector=k8s.LabelSelector(match_labels={"kubernetes.io/metadata.name": namespace})
            )
            for namespace in scraper_namespaces
        ]
        self.metrics_policy = k8s.KubeNetworkPolicy(
            self,
            "MetricsScrapers",
            metadata=meta("warmstart-agent-metrics"),
            spec=k8s.NetworkPolicySpec(
                pod_selector=k8s.LabelSelector(match_labels=LABELS),
                policy_types=["Ingress"],
                ingress=[
                    k8s.NetworkPolicyIngressRule(
                        from_=sources,
                        ports=[k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(port), protocol="TCP")],
                    )
                ]
                if sources
                else [],
            ),
        )

    def _binding_and_settings(self, settings_json: str) -> None:
        self.binding = k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s.ObjectMeta(name="warmstart-agent", labels=LABELS),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="warmstart-agent"),
            subjects=[k8s.Subject(kind="ServiceAccount", name=AGENT_SERVICE_ACCOUNT, namespace=AGENT_NAMESPACE)],
        )
        self.settings = k8s.KubeConfigMap(
            self, "Settings", metadata=meta("warmstart-agent-settings"), data={SETTINGS_FILE: settings_json}
        )

    def _own_node_only(self) -> None:
        self.own_node_policy, self.own_node_binding = deny_policy(
            self,
            "OwnNodeOnly",
            name="warmstart-agent-own-node-only",
            labels=LABELS,
            operations=["UPDATE"],
            resources=["nodes"],
            match_conditions=[_IS_THE_AGENT],
            variables=[
                k8s.Variable(name="ours", expression=repr([f"{domain}/" for domain in LABEL_DOMAINS])),
                k8s.Variable(
                    name="newLabels",
                    expression="has(object.metadata.labels) ? object.metadata.labels : {}",
                ),
                k8s.Variable(
                    name="oldLabels",
                    expression="has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}",
                ),
            ],
            validations=_own_node_validations(),
        )

    def _own_starts_only(self) -> None:
        # RBAC cannot limit `create` to names: the agent may write only its own node's starts ConfigMap
        # (server-side apply is admitted as CREATE or UPDATE), never the settings or another node's starts.
        self.own_starts_policy, self.own_starts_binding = deny_policy(
            self,
            "OwnStartsOnly",
            name=OWN_STARTS_POLICY,
            labels=LABELS,
            operations=["CREATE", "UPDATE", "DELETE"],
            resources=["configmaps"],
            match_conditions=[_IS_THE_AGENT],
            validations=[
                k8s.Validation(
                    expression=(
                        "request.operation != 'DELETE' && has(request.userInfo.extra) && "
                        "'authentication.kubernetes.io/node-name' in request.userInfo.extra && "
                        f"request.namespace == '{AGENT_NAMESPACE}' && "
                        f"object.metadata.name == '{starts_config_map_name('')}' + "
                        "request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"
                    ),
                    message="the warmstart agent may write only its own node's starts ConfigMap",
                )
            ],
        )

    def _daemon_set(self, settings: AgentSettings, settings_json: str, image: str, folders: NodeFolders) -> None:
        cache_root, weights_root, pod_records_root = folders.cache_root, folders.weights_root, folders.pod_records_root
        port = settings.metrics_port
        # No pod writes the agent's inputs except through the mounts warmstart renders (node_agent/host_path_policy.py).
        agent_pod = _agent_pod(
            image, cache_root, weights_root if settings.weights_models else None, pod_records_root, metrics_port=port
        )
        self.host_path_policy, self.host_path_binding = host_path_policy(
            self,
            compile_root=cache_root,
            weights_root=weights_root if settings.weights_models else None,
            records_root=pod_records_root,
            agent_host_paths=[v.host_path.path for v in agent_pod.volumes or [] if v.host_path],
            trusted_readers=list(folders.trusted_readers),
            labels=LABELS,
        )
        self.daemon_set = k8s.KubeDaemonSet(
            self,
            "DaemonSet",
            metadata=k8s.ObjectMeta(
                name="warmstart-agent", namespace=AGENT_NAMESPACE, labels=LABELS, annotations=AGENT_ANNOTATIONS
            ),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=LABELS),
                update_strategy=k8s.DaemonSetUpdateStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDaemonSet(max_unavailable=k8s.IntOrString.from_string("25%")),
                ),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=LABELS,
                        # New settings (a changed model) roll the agents, which then restore the new keys.
                        annotations={
                            "warmstart.io/settings-sha256": hashlib.sha256(settings_json.encode()).hexdigest(),
                            **scrape_annotations(port),
                        },
                    ),
                    spec=agent_pod,
                ),
            ),
        )
        self.daemon_set.add_dependency(self.settings)


def _agent_pod(
    image: str, cache_root: str, weights_root: str | None, pod_records_root: str, *, metrics_port: int
) -> k8s.PodSpec:
    mounts, volumes = _agent_volumes(cache_root, weights_root, pod_records_root)
    return isolated_pod_spec(
        service_account_name=AGENT_SERVICE_ACCOUNT,
        # The same MCS level as the vLLM pods: files restored by one are readable by the other under SELinux.
        security_context=pod_security(),
        node_selector=gpu_pool_selector(),
        tolerations=pool_k8s_tolerations(),
        termination_grace_period_seconds=30,
        containers=[
            k8s.Container(
                name="agent",
                image=image,
                ports=[k8s.ContainerPort(name="metrics", container_port=metrics_port, protocol="TCP")],
                env=[
                    k8s.EnvVar(
                        name="NODE_NAME",
                        value_from=k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path="spec.nodeName")),
                    ),
                    k8s.EnvVar(name="WARMSTART_AGENT_SETTINGS", value=f"{SETTINGS_MOUNT}/{SETTINGS_FILE}"),
                    k8s.EnvVar(name="WARMSTART_HEARTBEAT", value=HEARTBEAT_FILE),
                    k8s.EnvVar(name="WARMSTART_READY", value=READY_FILE),
                ],
                # Measured peak about 120 MB resident during a download (make bench, weights_prefetch); the rest
                # is room for the page cache of files it writes, which cgroup v2 charges to the pod.
                resources=k8s.ResourceRequirements(
                    requests={
                        "cpu": k8s.Quantity.from_string("100m"),
                        "memory": k8s.Quantity.from_string(f"{AGENT_MEMORY_GIB}Gi"),
                    },
                    limits={"memory": k8s.Quantity.from_string(f"{AGENT_MEMORY_GIB}Gi")},
                ),
                # Root only to own the folders it creates on the host paths; no capability, no escalation.
                security_context=locked_down(read_only_root=True, run_as_user=0),
                # Start restores every model's compile cache before the first beat: up to 30 minutes. Then the
                # heartbeat stops as soon as any loop (compile caches, cleanup, weights downloads or confirmations)
                # has made no progress for its period plus 10 minutes: restarted within about 15 minutes.
                startup_probe=_heartbeat_probe(period_seconds=30, failure_threshold=60),
                liveness_probe=_heartbeat_probe(period_seconds=60, failure_threshold=3),
                # Ready (the DaemonSet's READY count, `warmstart status`): start-up done and the loop beating.
                readiness_probe=_heartbeat_probe(period_seconds=30, failure_threshold=1, ready_file=READY_FILE),
                volume_mounts=mounts,
            )
        ],
        volumes=volumes,
    )


def _agent_volumes(
    cache_root: str, weights_root: str | None, pod_records_root: str
) -> tuple[list[k8s.VolumeMount], list[k8s.Volume]]:
    """The agent's host folders and scratch space, each mounted where the agent's settings say."""
    mounts = [
        k8s.VolumeMount(name="settings", mount_path=SETTINGS_MOUNT, read_only=True),
        k8s.VolumeMount(name="compile-cache", mount_path=AGENT_CACHE_MOUNT),
        k8s.VolumeMount(name="pod-records", mount_path=AGENT_PODS_MOUNT),
        k8s.VolumeMount(name="tmp", mount_path="/tmp"),
        k8s.VolumeMount(name="pod-logs", mount_path=AGENT_POD_LOGS_MOUNT, read_only=True),
    ]
    volumes = [
        k8s.Volume(name="settings", config_map=k8s.ConfigMapVolumeSource(name="warmstart-agent-settings")),
        k8s.Volume(name="compile-cache", host_path=k8s.HostPathVolumeSource(path=cache_root, type="DirectoryOrCreate")),
        k8s.Volume(
            name="pod-records", host_path=k8s.HostPathVolumeSource(path=pod_records_root, type="DirectoryOrCreate")
        ),
        k8s.Volume(name="tmp", empty_dir=k8s.EmptyDirVolumeSource(size_limit=k8s.Quantity.from_string("1Gi"))),
        # kubelet writes every container's output here; the agent reads the vLLM pods' lines (root-owned files:
        # the agent runs as root; on Bottlerocket the files are local_t, which any container may read).
        k8s.Volume(name="pod-logs", host_path=k8s.HostPathVolumeSource(path=POD_LOGS_HOST_PATH, type="Directory")),
    ]
    if weights_root:
        mounts.append(k8s.VolumeMount(name="weights", mount_path=AGENT_WEIGHTS_MOUNT))
        volumes.append(
            k8s.Volume(name="weights", host_path=k8s.HostPathVolumeSource(path=weights_root, type="DirectoryOrCreate"))
        )
    return mounts, volumes


def _heartbeat_probe(*, period_seconds: int, failure_threshold: int, ready_file: str | None = None) -> k8s.Probe:
    ready = f"os.path.exists('{ready_file}') and " if ready_file else ""
    return k8s.Probe(
        exec=k8s.ExecAction(
            command=[
                "python",
                "-c",
                f"import os, sys, time; sys.exit(not ({ready}time.time() - os.path.getmtime('{HEARTBEAT_FILE}') <= "
                f"{HEARTBEAT_MAX_AGE_SECONDS}))",
            ]
        ),
        period_seconds=period_seconds,
        failure_threshold=failure_threshold,
        timeout_seconds=10,  # a Python start on a node whose CPUs compile
    )
