"""KEDA's own build in the control-plane tier: its operator and its metrics adapter (tests/monitoring/build.py, the
version the shipped chart runs) as processes beside the test API server, the adapter behind the APIService
`v1beta1.external.metrics.k8s.io` as the chart registers it, and KEDA's CRDs from the same Go module.

What differs from the chart's install, each for a reason of this machine: the certificates are made here (the
chart's operator makes them and a kubelet mounts them), so certificate rotation is off; no admission webhooks run
(they only refuse bad ScaledObjects; warmstart's are schema-checked); the adapter's Service has an EndpointSlice to
this machine's own address (the aggregator refuses loopback), and the operator's gRPC service is on loopback.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import yaml

from tests.cluster.api import Api
from tests.cluster.control_plane import (
    ControlPlane,
    _openssl,
    direct_env,
    free_port,
    go_module_source,
    machine_address,
    stop_processes,
)
from tests.monitoring.build import KEDA
from warmstart.autoscaling import KEDA_CHART_VERSION, MONITORING_NAMESPACE

# The chart's Service names (kedacore/charts keda: keda-operator, keda-operator-metrics-apiserver).
OPERATOR_SERVICE, ADAPTER_SERVICE = "keda-operator", "keda-operator-metrics-apiserver"
GROUP, VERSION = "external.metrics.k8s.io", "v1beta1"


def keda_crds() -> list[dict]:
    """Every CRD the operator needs at start (config/crd/bases of the Go module at the chart's version)."""
    folder = go_module_source("github.com/kedacore/keda/v2", f"v{KEDA_CHART_VERSION}") / "config" / "crd" / "bases"
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


class KedaChain:
    def __init__(self, plane: ControlPlane, root: Path) -> None:
        self.plane = plane
        self.root = root
        self.certs = root / "certs"
        self.address = machine_address()
        self.adapter_port, self.grpc_port = free_port(), free_port()
        self.processes: dict[str, subprocess.Popen] = {}

    def _certificates(self) -> None:
        """One CA and one leaf for both processes (the operator's gRPC server, the adapter's HTTPS server and
        gRPC client), with the names the chart's Services give them and the addresses they are reached at here."""
        self.certs.mkdir(parents=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=keda-test-ca",
                 "-keyout", "ca.key", "-out", "ca.crt", cwd=self.certs)  # fmt: skip
        names = [f"DNS:{s}.{MONITORING_NAMESPACE}.svc" for s in (OPERATOR_SERVICE, ADAPTER_SERVICE)]
        (self.certs / "leaf.ext").write_text(
            f"subjectAltName={','.join([*names, 'IP:127.0.0.1', f'IP:{self.address}'])}\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=keda", "-keyout", "tls.key",
                 "-out", "tls.csr", cwd=self.certs)  # fmt: skip
        _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", "tls.crt", "-extfile", "leaf.ext", cwd=self.certs)  # fmt: skip

    def start(self, api: Api) -> KedaChain:
        if not KEDA.built():
            raise RuntimeError(f"KEDA is not built: make monitoring-chain (builds into {KEDA.folder})")
        self._certificates()
        kubeconfig = str(self.plane.kubeconfig("admin"))
        env = {
            **direct_env(),
            "WATCH_NAMESPACE": "",  # every namespace (the operator exits when it is unset)
            "POD_NAMESPACE": MONITORING_NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": MONITORING_NAMESPACE,
        }
        self._spawn("keda-operator", [
            str(KEDA.binary("operator")), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--enable-cert-rotation=false", f"--cert-dir={self.certs}",
            f"--metrics-service-bind-address=127.0.0.1:{self.grpc_port}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}", f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        ], env)  # fmt: skip
        self._spawn("keda-adapter", [
            str(KEDA.binary("adapter")), f"--kubeconfig={kubeconfig}", f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            f"--secure-port={self.adapter_port}", f"--cert-dir={self.certs}",
            f"--tls-cert-file={self.certs / 'tls.crt'}", f"--tls-private-key-file={self.certs / 'tls.key'}",
            f"--client-ca-file={self.certs / 'ca.crt'}", f"--metrics-service-address=127.0.0.1:{self.grpc_port}",
            f"--port={free_port()}",
        ], env)  # fmt: skip
        self._register(api)
        return self

    def _spawn(self, name: str, arguments: list[str], env: dict[str, str]) -> None:
        log = open(self.root / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen(
            arguments, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )

    def _register(self, api: Api) -> None:
        """The adapter's Service (no selector), its EndpointSlice (this machine's address) and the APIService the
        chart creates, with the CA the aggregator checks the adapter's certificate against."""
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_SERVICE, "namespace": MONITORING_NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.adapter_port, "protocol": "TCP"}]},
        }
        endpoints = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": ADAPTER_SERVICE,
                "namespace": MONITORING_NAMESPACE,
                "labels": {"kubernetes.io/service-name": ADAPTER_SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self.adapter_port, "protocol": "TCP"}],
        }
        api_service = {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{VERSION}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {"namespace": MONITORING_NAMESPACE, "name": ADAPTER_SERVICE, "port": 443},
                "caBundle": base64.b64encode((self.certs / "ca.crt").read_bytes()).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
        for obj in (service, endpoints, api_service):
            answer = api.apply(obj)
            assert answer.ok, answer.message

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n" + re.sub(r"\n+", "\n", (self.root / f"{name}.log").read_text()[-4000:])
            for name in self.processes
        )

    def stop(self) -> None:
        stop_processes(self.processes)
