"""The prefetch benchmark's native reference: the same model downloaded by AWS's native S3 client (awscrt's S3Client,
the C library under the AWS CLI's CRT transfers and Mountpoint for S3) at its defaults, in a fresh process.

It lists the prefix and fetches every object with the client's own parallel ranged GETs (8 MiB parts, connections
sized by its 10 Gb/s default target), which the client writes to the files itself: whole pages with O_DIRECT
(S3FileIoOptions.direct_io; aws-c-s3 applies it to downloads too), and a body that is not whole pages (a small
object, an odd last part) through the page cache, with a warning on stderr (direct_io_fallbacks counts them).
Nothing is synced and nothing verified; its memory is its default limit's (no cgroup). What a client with no Python
between the socket and the disk reaches on this machine: its only Python is the interpreter and awscrt's import
(botocore is never imported). Prints when the last object was written (as the agent's publication and s5cmd's exit:
not yet synced), on the clock every process of the machine shares.

Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, as they do for s5cmd.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from urllib.parse import quote, urlsplit

from awscrt import auth, http, io, s3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The agent's own check of a listed key (no botocore behind it: this worker's start-up stays awscrt's alone).
from node_agent.runtime.untrusted import relative_key  # noqa: E402

S3_XMLNS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


# aws-c-s3's warnings when a download's O_DIRECT write or open is refused and it writes through the page cache
# (awscrt 0.38.1: "Falling back to buffered I/O.", "This writer will use buffered I/O.", "Writing this body buffered.").
_BUFFERED_FALLBACK = re.compile(r"buffered I/O|body buffered")


def direct_io_fallbacks(log: str) -> int:
    """How many of the client's log lines say a direct write fell back to the page cache."""
    return sum(1 for line in log.splitlines() if _BUFFERED_FALLBACK.search(line))


def listed_keys(document: bytes) -> tuple[list[str], str | None]:
    """The keys of one ListObjectsV2 page and the token of the next (None on the last); a truncated page without a
    token is refused (the listing would end early, short of keys)."""
    root = ElementTree.fromstring(document)
    keys = [element.text or "" for element in root.iter(f"{S3_XMLNS}Key")]
    if (root.findtext(f"{S3_XMLNS}IsTruncated") or "false") != "true":
        return keys, None
    token = root.findtext(f"{S3_XMLNS}NextContinuationToken")
    if not token:
        raise ValueError("a truncated ListObjectsV2 page without a NextContinuationToken")
    return keys, token


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
        seen: set[str] = set()
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
            if token in seen:  # a server handing the same page again would list forever
                raise ValueError(f"ListObjectsV2 returned the continuation token {token!r} twice")
            seen.add(token)

    def download_all(self, bucket: str, keys: list[str], prefix: str, folder: Path) -> None:
        """Every object at once: the client spreads their parts over its connections."""
        requests = []
        for key in keys:
            path = folder / relative_key(key, prefix)
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
    io.init_logging(io.LogLevel.Warn, "stderr")  # once per process
    client = NativeClient(endpoint, os.environ.get("AWS_REGION", "us-east-1"))
    keys = [key for key in client.list(bucket, prefix) if not key.endswith("/")]
    client.download_all(bucket, keys, prefix, Path(folder))
    print(json.dumps({"objects": len(keys), "done_monotonic": time.monotonic()}))


if __name__ == "__main__" and sys.argv[1:] == ["--imports-only"]:
    pass  # its modules read into the page cache before a timed run, as the agent's are (weights_prefetch.settle_alike)
elif __name__ == "__main__":
    main(*sys.argv[1:5])
