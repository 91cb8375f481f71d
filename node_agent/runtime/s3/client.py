"""The agent's S3 client: bounded calls, adaptive retries, botocore's loaders cut to S3, the error codes the stores
read, and a ranged GET's body read straight into a buffer. The `s3` package is the only code of the agent that talks
to botocore."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

MISSING = {"404", "NoSuchKey", "NotFound"}
# The small JSON objects the agent reads (manifests, last-use records): a few kB each.
JSON_MAX_BYTES = 2**20
DENIED = {"403", "AccessDenied", "Forbidden"}
# A compile archive's ranges are read into a per-thread buffer of this size and written from it.
DOWNLOAD_CHUNK_BYTES = 2**20
# 412: another writer created the key first; 409 ConditionalRequestConflict: one is creating it right now.
PRECONDITION_FAILED = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}


# Every call ends: a connection within 5 s, then no more than 20 s between bytes (a 64 MiB range streams far
# faster; a silent endpoint is given up), 4 attempts: under two minutes per call with the retries' backoff. An S3
# endpoint that accepts connections and never answers blocked one call for 367 s with boto3's defaults.
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 20
ATTEMPTS = 4


def s3_client(region: str, *, connections: int, attempts: int = ATTEMPTS, **endpoint):
    """The agent's S3 client: bounded calls (above), adaptive retries, a connection per download stream.

    botocore's own session (what boto3.client wraps, the same credential chain: EKS Pod Identity's container
    credentials): boto3 would also import s3transfer, 0.2 s of the agent's start on 2 cores for nothing it uses."""
    session = botocore.session.get_session()
    session.register_component("data_loader", S3OnlyLoader.for_session(session))
    # The agent reads no time from S3; botocore would parse every one (dateutil, about 0.4 ms of CPU each: a GET's
    # Last-Modified, 1000 per listing page). They stay the strings S3 sent.
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_as_sent)
    return session.create_client(
        "s3",
        region_name=region,
        config=Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            retries={"mode": "adaptive", "total_max_attempts": attempts},  # the first request included
            max_pool_connections=connections,
            # botocore would ask every GET for S3's checksum and CRC the whole body again: the agent checks what
            # it downloads itself (weights against S3's checksums, archives and manifests against the SHA-256
            # their publisher recorded), so it asks only where it reads the checksum (ChecksumMode="ENABLED").
            response_checksum_validation="when_required",
            s3={"addressing_style": "path"} if endpoint else None,
        ),
        **endpoint,
    )


class PlainJSONFileLoader(botocore.loaders.JSONFileLoader):
    """botocore's model files read into plain dicts, in one piece.

    botocore parses each file with an OrderedDict hook (a Python call per JSON object) and reads its gzip in
    chunks: the three files an S3 client loads (endpoints, S3's model, its endpoint rules; 3.5 MB of JSON) took
    35 ms to parse on 2 cores, 19 ms as plain dicts, which keep the files' order as well (the client's creation:
    45-50 ms, then 31-35 ms)."""

    def load_file(self, file_path):
        for extension, read in ((".json", Path.read_bytes), (".json.gz", lambda p: gzip.decompress(p.read_bytes()))):
            path = Path(file_path + extension)
            if path.is_file():
                return json.loads(read(path))
        return None


class S3OnlyLoader(botocore.loaders.Loader):
    """botocore's model loader, told that the agent's only service is S3.

    Before loading a model botocore checks that the service exists by listing every service's folders in its
    data: about 900 directory reads, 0.05-0.09 s of the agent's start on 2 cores, for ~400 services it never
    uses. This one looks in S3's folders alone, with the same test (a folder holding a file of that type)."""

    SERVICES = ("s3",)
    FILE_LOADER_CLASS = PlainJSONFileLoader

    @classmethod
    def for_session(cls, session) -> S3OnlyLoader:
        # What botocore's own factory would build: its search paths plus AWS_DATA_PATH's.
        data_path = session.get_config_variable("data_path")
        extra = [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)] if data_path else []
        return cls(extra_search_paths=extra)

    def list_available_services(self, type_name: str) -> list[str]:
        return sorted(
            service
            for service in self.SERVICES
            if any(
                self.file_loader.exists(os.path.join(folder, version, type_name))
                for folder in self._potential_locations(service, must_exist=True, is_dir=True)
                for version in os.listdir(folder)
            )
        )


def _as_sent(value: str) -> str:
    return value


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class MissingObject(IOError):
    """An object that should be there is not (a manifest naming a deleted archive)."""


class ObjectChanged(IOError):
    """The object changed in S3 while it was being downloaded (its ETag no longer matches the listing)."""


def _http_layers(body) -> tuple[object, object]:
    """The urllib3 response and the http.client response under a body: botocore's StreamingBody, or the urllib3
    response that StreamingBody's `with` gives."""
    response = getattr(body, "_raw_stream", body)
    return response, getattr(response, "_fp", None)


def zero_copy_reader(body) -> Callable:
    """readinto straight from the HTTP response (socket into our buffer).

    urllib3's own readinto reads into a new bytes object and copies it: one allocation and one extra copy
    per buffer, a quarter of the agent's CPU per GB. The http.client response under it fills the buffer in
    place. Falls back to the public path if the layering differs (another HTTP stack).
    """
    _, raw = _http_layers(body)
    return raw.readinto if raw is not None and hasattr(raw, "readinto") else body.readinto


def end_of_range(body, read_into: Callable, key: str, start: int, end: int, offset: int) -> None:
    """After a range's reads, which never go past it: more bytes from the server (it ignored the range) or fewer
    are refused; a complete body's connection goes back to the pool (a short body's is not one to reuse)."""
    if offset != end + 1:
        raise OSError(f"short read of {key} bytes {start}-{end}: got {offset - start}")
    if read_into(bytearray(1)):
        raise OSError(f"{key}: more bytes than asked for in {start}-{end}")
    _keep_connection(body)


def _keep_connection(body) -> None:
    """After a zero-copy read to the end, the connection goes back to urllib3's pool, as its own read would do;
    otherwise the body's close drops it and every request opens a new connection (a TLS handshake on S3)."""
    response, raw = _http_layers(body)
    isclosed = getattr(raw, "isclosed", None)
    if isclosed is not None and isclosed() and hasattr(response, "release_conn"):
        response.release_conn()
