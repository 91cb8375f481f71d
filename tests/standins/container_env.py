"""A container's environment (and its expanded command and arguments) as the cluster builds it.

Mirrors, step by step (sources read at the versions named; docs/upstream-facts.md, "Kubernetes, containerd"):
1. The API server defaults `spec.enableServiceLinks` to true when a pod leaves it out
   (kubernetes v1.35.4 pkg/apis/core/v1/defaults.go SetDefaults_Pod).
2. kubelet's service variables (v1.35.4 pkg/kubelet/kubelet_pods.go getServiceEnvVarMap, pkg/kubelet/envvars/
   envvars.go FromServices): the `kubernetes` Service of the `default` namespace always; every other Service of
   the pod's namespace only while service links are on; Services without a cluster IP (headless) never. Each gives
   <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT (first port), <NAME>_SERVICE_PORT_<PORT NAME> per named port, and the
   Docker-link variables <NAME>_PORT=<proto>://<ip>:<port> (first port) and <NAME>_PORT_<port>_<PROTO>[_PROTO|
   _PORT|_ADDR] per port; NAME is the Service name upper-cased with '-' as '_'.
3. kubelet's container variables (makeEnvironmentVariables): envFrom sources first (each key with its prefix),
   then `env` in order, each either a value with `$(VAR)` references expanded against the variables declared so
   far and then the service variables, or a `valueFrom` source (fieldRef: downward API, configMapKeyRef,
   secretKeyRef); a declared variable replaces a service variable of the same name.
4. `$(VAR)` expansion (third_party/forked/golang/expansion/expand.go): `$$` is a literal `$`, `$(NAME)` is the
   value when NAME is defined and stays as written otherwise; command and args are expanded against the final
   variables (pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs).
5. containerd's CRI spec (v2.2.7 internal/cri/server/container_create.go, pkg/oci/spec_opts.go): the default PATH,
   then HOSTNAME (the pod's host name), then the image's ENV, then kubelet's variables, each replacing an earlier
   one of the same name; runc adds HOME from the user's passwd entry when none is set (runc v1.5.1
   libcontainer/env.go prepareEnv).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# containerd pkg/oci/spec.go defaultUnixEnv.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The API server's own Service, which every pod's containers see (pkg/kubelet/kubelet_pods.go masterServices).
KUBERNETES_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "kubernetes", "namespace": "default"},
    "spec": {"clusterIP": "172.20.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
}


def service_links_enabled(pod_spec: Mapping) -> bool:
    """`enableServiceLinks` after the API server's defaulting (absent: true)."""
    value = pod_spec.get("enableServiceLinks")
    return True if value is None else bool(value)


def _variable_name(service_name: str) -> str:
    return service_name.replace("-", "_").upper()


def _has_cluster_ip(service: Mapping) -> bool:
    return service["spec"].get("clusterIP") not in (None, "", "None")


def service_variables(services: Iterable[Mapping], namespace: str, enable_service_links: bool) -> dict[str, str]:
    """The variables kubelet derives from Services for a pod of `namespace`."""
    chosen: dict[str, Mapping] = {}
    for service in services:
        if not _has_cluster_ip(service):
            continue
        name, service_namespace = service["metadata"]["name"], service["metadata"].get("namespace", "default")
        if service_namespace == "default" and name == "kubernetes":
            chosen.setdefault(name, service)
        elif service_namespace == namespace and enable_service_links:
            chosen[name] = service
    variables: dict[str, str] = {}
    for service in chosen.values():
        prefix, ip, ports = (
            _variable_name(service["metadata"]["name"]),
            service["spec"]["clusterIP"],
            service["spec"]["ports"],
        )
        variables[f"{prefix}_SERVICE_HOST"] = ip
        variables[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                variables[f"{prefix}_SERVICE_PORT_{_variable_name(port['name'])}"] = str(port["port"])
        for index, port in enumerate(ports):
            protocol = port.get("protocol") or "TCP"
            host_port = f"[{ip}]:{port['port']}" if ":" in ip else f"{ip}:{port['port']}"
            url = f"{protocol.lower()}://{host_port}"
            if index == 0:
                variables[f"{prefix}_PORT"] = url
            port_prefix = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
            variables[port_prefix] = url
            variables[f"{port_prefix}_PROTO"] = protocol.lower()
            variables[f"{port_prefix}_PORT"] = str(port["port"])
            variables[f"{port_prefix}_ADDR"] = ip
    return variables


def expand(text: str, *contexts: Mapping[str, str]) -> str:
    """kubelet's `$(VAR)` expansion, byte for byte as expansion.Expand does it."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            following = text[cursor + 1]
            if following == "$":
                out.append("$")
                advance = 1
            elif following == "(":
                closing = text.find(")", cursor + 2)
                if closing == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = text[cursor + 2 : closing]
                    out.append(next((c[name] for c in contexts if name in c), f"$({name})"))
                    advance = closing - cursor
            else:
                out.append("$" + following)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def downward_api_value(field_path: str, pod: Mapping) -> str:
    """The fieldRef paths kubelet resolves (podFieldSelectorRuntimeValue, fieldpath.ExtractFieldPathAsString)."""
    metadata, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
    }
    if field_path in simple:
        return simple[field_path]
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if field_path.startswith(prefix + "['") and field_path.endswith("']"):
            return metadata.get(source, {}).get(field_path[len(prefix) + 2 : -2], "")
    raise AssertionError(f"downward API field not mirrored: {field_path}")


def kubelet_environment(
    pod: Mapping,
    container: Mapping,
    *,
    services: Iterable[Mapping],
    config_maps: Mapping[str, Mapping[str, str]] | None = None,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str]:
    """The variables kubelet hands the runtime for one container of `pod` (an API object after admission)."""
    config_maps, secrets = config_maps or {}, secrets or {}
    service_env = service_variables(services, pod["metadata"]["namespace"], service_links_enabled(pod["spec"]))
    declared: dict[str, str] = {}
    for source in container.get("envFrom", []):
        reference = source.get("configMapRef") or source.get("secretRef")
        store = config_maps if "configMapRef" in source else secrets
        if reference["name"] not in store:
            if reference.get("optional"):
                continue
            raise AssertionError(f"{reference['name']} not found: kubelet would not start {container['name']}")
        for key, value in store[reference["name"]].items():
            declared[source.get("prefix", "") + key] = value
    for variable in container.get("env", []):
        if variable.get("value"):
            value = expand(variable["value"], declared, service_env)
        elif "valueFrom" in variable:
            source = variable["valueFrom"]
            if "fieldRef" in source:
                value = downward_api_value(source["fieldRef"]["fieldPath"], pod)
            elif "configMapKeyRef" in source or "secretKeyRef" in source:
                key_ref = source.get("configMapKeyRef") or source["secretKeyRef"]
                store = config_maps if "configMapKeyRef" in source else secrets
                found = store.get(key_ref["name"], {})
                if key_ref["key"] not in found:
                    if key_ref.get("optional"):
                        continue
                    raise AssertionError(f"{key_ref['name']}/{key_ref['key']} not found for {container['name']}")
                value = found[key_ref["key"]]
            else:
                raise AssertionError(f"env source not mirrored: {source}")
        else:
            value = ""
        declared[variable["name"]] = value
    return {**{k: v for k, v in service_env.items() if k not in declared}, **declared}


def process_environment(
    kubelet_env: Mapping[str, str], *, image_env: Mapping[str, str], hostname: str, home: str = "/root"
) -> dict[str, str]:
    """What the container's first process sees: containerd's defaults, the image's ENV, then kubelet's
    variables, later ones replacing earlier ones in place; HOME from the user's passwd entry when none is set."""
    env = {"PATH": DEFAULT_PATH, "HOSTNAME": hostname, **image_env, **kubelet_env}
    if not env.get("HOME"):
        env.pop("HOME", None)
        env["HOME"] = home
    return env


def expanded_command(container: Mapping, kubelet_env: Mapping[str, str]) -> list[str]:
    """command + args after kubelet's expansion against kubelet's variables (not the image's ENV)."""
    return [expand(part, kubelet_env) for part in [*container.get("command", []), *container.get("args", [])]]


def with_cluster_ips(services: Iterable[Mapping], first_host: int = 10) -> list[dict]:
    """Services as the API server stores them: each ClusterIP Service gets an address of the service range
    (EKS: 172.20.0.0/16 unless the cluster names another); a headless one (clusterIP: None) keeps none."""
    stored = []
    for index, service in enumerate(services):
        spec = dict(service["spec"])
        if spec.get("clusterIP") != "None" and spec.get("type", "ClusterIP") in (
            "ClusterIP",
            "NodePort",
            "LoadBalancer",
        ):
            spec.setdefault("clusterIP", f"172.20.{(first_host + index) // 250}.{(first_host + index) % 250 + 1}")
        stored.append({**service, "spec": spec})
    return stored
