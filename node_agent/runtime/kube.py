"""The Kubernetes API, as much of it as the agent needs: its own node, the pods on it, their events, and the
ConfigMap where it publishes its node's pod starts.

`KubeApi` builds requests; a transport sends them. Tests pass a fake transport and check the request
shapes; the DaemonSet uses `InClusterTransport`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Protocol

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status


class Transport(Protocol):
    def request(
        self, method: str, path: str, *, body: dict | None = None, content_type: str | None = None
    ) -> tuple[int, dict]: ...


class InClusterTransport:
    def __init__(self, host: str, port: str, *, account_dir: Path = SERVICE_ACCOUNT_DIR, timeout: float = 10.0) -> None:
        self._base = f"https://{host}:{port}"
        self._account_dir = account_dir
        self._timeout = timeout
        self._tls = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))

    def request(
        self, method: str, path: str, *, body: dict | None = None, content_type: str | None = None
    ) -> tuple[int, dict]:
        # Re-read each time: projected tokens rotate.
        token = (self._account_dir / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        request = urllib.request.Request(self._base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._tls) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


class KubeApi:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def _call(self, method: str, path: str, **kwargs) -> dict:
        status, document = self._transport.request(method, path, **kwargs)
        if status >= 300:
            raise KubeError(status, document.get("message", ""))
        return document

    def node(self, name: str) -> dict:
        return self._call("GET", f"/api/v1/nodes/{urllib.parse.quote(name)}")

    def label_node(self, name: str, labels: dict[str, str | None]) -> dict:
        """Merge patch of labels only (None deletes a label); an admission policy limits it to our domain."""
        return self._call(
            "PATCH",
            f"/api/v1/nodes/{urllib.parse.quote(name)}",
            body={"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def daemon_set(self, namespace: str, name: str) -> dict:
        return self._call(
            "GET", f"/apis/apps/v1/namespaces/{urllib.parse.quote(namespace)}/daemonsets/{urllib.parse.quote(name)}"
        )

    def pod_events(self, namespace: str, uid: str) -> list[dict]:
        query = urllib.parse.urlencode({"fieldSelector": f"involvedObject.uid={uid}"})
        return self._call("GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/events?{query}").get("items", [])

    def apply_config_map(self, namespace: str, body: dict) -> dict:
        """Server-side apply (creates or updates; this agent owns the fields it sets)."""
        name = urllib.parse.quote(body["metadata"]["name"])
        query = urllib.parse.urlencode({"fieldManager": "warmstart-agent", "force": "true"})
        return self._call(
            "PATCH",
            f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps/{name}?{query}",
            body=body,
            content_type="application/apply-patch+yaml",  # JSON is YAML
        )

    def config_map(self, namespace: str, name: str) -> dict:
        return self._call(
            "GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps/{urllib.parse.quote(name)}"
        )

    def pods_on_node(self, node: str, label_selector: str = "") -> list[dict]:
        """The pods on `node`, those with `label_selector`'s labels where one is given."""
        fields = {"fieldSelector": f"spec.nodeName={node}"} | (
            {"labelSelector": label_selector} if label_selector else {}
        )
        query = urllib.parse.urlencode(fields)
        return self._call("GET", f"/api/v1/pods?{query}").get("items", [])


def is_ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return pod.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def host_paths(pod: dict) -> list[str]:
    return [v["hostPath"]["path"] for v in pod.get("spec", {}).get("volumes", []) if "hostPath" in v]
