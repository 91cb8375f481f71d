"""The prefetch benchmark's ceiling: the same model downloaded by AWS's native S3 client (awscrt's S3Client, the C
library under the AWS CLI's CRT transfers and Mountpoint for S3), in a fresh process, as a reference.

It lists the prefix and fetches every object with the client's own parallel ranged GETs, written by the client
straight to the disk (S3FileIoOptions.direct_io), and verifies nothing: what any client on this machine could reach
with no Python between the socket and the disk. Its only Python is the interpreter and awscrt's import (botocore
is never imported). Prints when the last object was on disk, on the clock every process of the machine shares.

Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, as they do for s5cmd.
"""

from __future__ import annotations

import json
import os
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlsplit

from awscrt import auth, http, io, s3

S3_XMLNS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def relative_path(key: str, prefix: str) -> PurePosixPath:
    """`key` below `prefix` as a path that stays below the folder it is written to (the keys are this run's own,
    still never trusted to build a path)."""
    parts = key[len(prefix) :].split("/") if key.startswith(prefix) else []
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{key!r} is no file path below {prefix!r}")
    return PurePosixPath(*parts)


def listed_keys(document: bytes) -> tuple[list[str], str | None]:
    """The keys of one ListObjectsV2 page and the token of the next (None on the last)."""
    root = ElementTree.fromstring(document)
    keys = [element.text or "" for element in root.iter(f"{S3_XMLNS}Key")]
    truncated = (root.findtext(f"{S3_XMLNS}IsTruncated") or "false") == "true"
    return keys, root.findtext(f"{S3_XMLNS}NextContinuationToken") if truncated else None


class NativeClient:
    def __init__(self, endpoint: str, region: str) -> None:
        parts = urlsplit(endpoint)
        self.host = parts.netloc
        self.event_loops = io.EventLoopGroup(os.cpu_count() or 1)
        bootstrap = io.ClientBootstrap(self.event_loops, io.DefaultHostResolver(self.event_loops))
        credentials = auth.AwsCredentialsProvider.new_static(
            os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        )
        self.client = s3.S3Client(
            bootstrap=bootstrap,
            region=region,
            signing_config=s3.create_default_s3_signing_config(region=region, credential_provider=credentials),
            tls_mode=s3.S3RequestTlsMode.DISABLED if parts.scheme == "http" else s3.S3RequestTlsMode.ENABLED,
            fio_options=s3.S3FileIoOptions(direct_io=True),
        )

    def _request(self, method: str, path: str) -> http.HttpRequest:
        return http.HttpRequest(method, path, http.HttpHeaders([("Host", self.host)]))

    def list(self, bucket: str, prefix: str, *, page_keys: int = 1000) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            query = f"list-type=2&max-keys={page_keys}&prefix={quote(prefix, safe='')}"
            query += f"&continuation-token={quote(token, safe='')}" if token else ""
            body = bytearray()
            request = self.client.make_request(
                type=s3.S3RequestType.DEFAULT,
                operation_name="ListObjectsV2",
                request=self._request("GET", f"/{bucket}?{query}"),
                on_body=lambda chunk, **_: body.extend(chunk),
            )
            request.finished_future.result()
            page, token = listed_keys(bytes(body))
            keys += page
            if token is None:
                return keys

    def download_all(self, bucket: str, keys: list[str], prefix: str, folder: Path) -> None:
        """Every object at once: the client spreads their parts over its connections."""
        requests = []
        for key in keys:
            path = folder / relative_path(key, prefix)
            path.parent.mkdir(parents=True, exist_ok=True)
            requests.append(
                self.client.make_request(
                    type=s3.S3RequestType.GET_OBJECT,
                    request=self._request("GET", f"/{bucket}/{quote(key)}"),
                    recv_filepath=str(path),
                )
            )
        for request in requests:
            request.finished_future.result()


def main(endpoint: str, bucket: str, prefix: str, folder: str) -> None:
    client = NativeClient(endpoint, os.environ.get("AWS_REGION", "us-east-1"))
    keys = [key for key in client.list(bucket, prefix) if not key.endswith("/")]
    client.download_all(bucket, keys, prefix, Path(folder))
    print(json.dumps({"objects": len(keys), "done_monotonic": time.monotonic()}))


if __name__ == "__main__" and sys.argv[1:] == ["--imports-only"]:
    pass  # its modules read into the page cache before a timed run, as the agent's are (weights_prefetch.settle_alike)
elif __name__ == "__main__":
    main(*sys.argv[1:5])
