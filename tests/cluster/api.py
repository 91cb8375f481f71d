"""A small client of the test control plane's API server: discovery, server-side apply (dry run or not) with the
server's warnings, reads and writes as any configured user. Standard library only (what the agent itself uses)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from tests.cluster.control_plane import ControlPlane, direct_opener

FIELD_MANAGER = "warmstart"
# What must exist before what names it: kubectl and CDK's handler apply in dependency order too.
ORDER = (
    "CustomResourceDefinition",
    "Namespace",
    "PriorityClass",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


@dataclass
class Answer:
    status: int
    body: dict
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message", self.body))


class Api:
    def __init__(self, plane: ControlPlane, user: str = "admin", *, token: str | None = None) -> None:
        self.plane = plane
        self.token = token or plane.tokens[user]
        self.context = ssl.create_default_context(cafile=str(plane.ca))
        self.opener = direct_opener(self.context)
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def request(self, method: str, path: str, body: object = None, *, content_type: str = "application/json") -> Answer:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.plane.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        try:
            with self.opener.open(request, timeout=30) as answer:
                return Answer(answer.status, _json(answer.read()), answer.headers.get_all("Warning") or [])
        except urllib.error.HTTPError as error:
            return Answer(error.code, _json(error.read()), error.headers.get_all("Warning") or [])

    def get(self, path: str) -> dict:
        answer = self.request("GET", path)
        assert answer.ok, f"GET {path}: {answer.status} {answer.message}"
        return answer.body

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from discovery (refreshed once when a CRD just arrived)."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for _ in range(20):
                answer = self.request("GET", base)
                found = [r for r in answer.body.get("resources", []) if r["kind"] == kind and "/" not in r["name"]]
                if found:
                    self._resources[key] = (found[0]["name"], found[0]["namespaced"])
                    break
                time.sleep(0.5)
            else:
                raise KeyError(f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, obj: dict) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self.resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        namespace = obj["metadata"].get("namespace") or "default"
        scope = f"/namespaces/{namespace}" if namespaced else ""
        return f"{base}{scope}/{plural}/{urllib.parse.quote(obj['metadata']['name'])}"

    def merge_patch(self, path: str, body: dict) -> None:
        """A JSON merge patch (what `kubectl patch --type merge` sends); asserts the server took it."""
        answer = self.request("PATCH", path, body, content_type="application/merge-patch+json")
        assert answer.ok, answer.message

    def apply(self, obj: dict, *, dry_run: bool = False) -> Answer:
        """Server-side apply, strict field validation (an unknown field is an error, as kubectl's default)."""
        query = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request(
            "PATCH",
            f"{self.path(obj)}?{urllib.parse.urlencode(query)}",
            obj,
            content_type="application/apply-patch+yaml",
        )

    def wait_established(self, crd_name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                return
            time.sleep(0.3)
        raise TimeoutError(f"CRD {crd_name} not established")


def in_order(objects: list[dict]) -> list[dict]:
    rank = {kind: index for index, kind in enumerate(ORDER)}
    return sorted(objects, key=lambda o: rank.get(o["kind"], len(ORDER)))


def _json(data: bytes) -> dict:
    try:
        value = json.loads(data) if data else {}
    except ValueError:
        return {"message": data.decode(errors="replace")}
    return value if isinstance(value, dict) else {"items": value}
