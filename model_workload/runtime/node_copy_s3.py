"""A read-only S3 endpoint on the pod's loopback that serves the node's verified copy of one model.

Why: vLLM's torch.compile cache folder is a hash that includes the model path it was given and, for an
`s3://` model, `model_weights` (the URI), which no command-line flag can set (vLLM 0.21.0,
vllm/config/model.py compute_hash and maybe_pull_model_tokenizer_for_runai; docs/upstream-facts.md). A pod
that passed a local folder would never hit a cache compiled by a pod that streamed from S3. So every pod
passes the same `--model=s3://bucket/prefix/`; when the node holds a fresh copy, the entry step points the
Run:ai streamer's S3 client here (AWS_ENDPOINT_URL, path-style, unsigned requests), and the bytes come
from NVMe instead of S3. Same arguments, same hash, same cache, whichever way the weights arrive.

Standard library only: it runs inside the serving image, from the pod's ConfigMap. It answers exactly the
calls the streamer and vLLM's config pull make (ListObjectsV2, HeadObject, GetObject with Range), refuses
every write, binds 127.0.0.1 only (the pod's own network namespace) and never serves outside its folder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from email.utils import formatdate
from http.server import HTTPServer
from pathlib import Path
from xml.sax.saxutils import escape

try:  # the serving image: the ConfigMap puts them beside this file
    from connection_guard import ConnectionGuard, GuardedRequestHandler, GuardedThreadingMixIn
    from file_identity import Identity, open_verified, record_identities
except ImportError:  # the repository
    from contracts.connection_guard import ConnectionGuard, GuardedRequestHandler, GuardedThreadingMixIn
    from contracts.file_identity import Identity, open_verified, record_identities

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
# Connections served at once: every tensor-parallel rank's streamer opens up to ~64 (8 ranks: ~500) plus vLLM's
# config pull; beyond this a connection gets 503 SlowDown at once (the streamer retries) instead of a thread.
MAX_CONNECTIONS = 1024
# A connection that says nothing for this long is closed (an idle keep-alive or a stalled client).
IDLE_SECONDS = 30
# A new connection sends its first request within this; a response takes at most RESPONSE_SECONDS plus its bytes at
# MIN_READ_RATE (loopback from NVMe runs at GB/s: a reader slower than this is stalled or hostile).
HEAD_SECONDS = 10
RESPONSE_SECONDS = 30
MIN_READ_RATE = 16 * 2**20


@dataclass(frozen=True)
class ServedObject:
    key: str
    relative: str
    identity: Identity  # what the agent verified (contracts/file_identity.py): inode, size, mtime_ns, ctime_ns, nlink
    etag: str

    @property
    def size(self) -> int:
        return self.identity[1]

    @property
    def mtime(self) -> float:
        return self.identity[2] / 1e9


def _objects(prefix: str, verified: dict[str, Identity]) -> dict[str, ServedObject]:
    """The files the agent verified, by their S3 keys; the ETag names the verified file (its key, size and times)."""
    found = {}
    for relative, identity in sorted(verified.items()):
        key = prefix + relative
        tag = hashlib.md5(f"{key}:{identity[1]}:{identity[2]}:{identity[3]}".encode(), usedforsecurity=False)
        found[key] = ServedObject(key, relative, identity, f'"{tag.hexdigest()}"')
    return found


class NodeCopyServer(GuardedThreadingMixIn, HTTPServer):
    allow_reuse_address = True
    head_seconds = HEAD_SECONDS
    # Every tensor-parallel rank's streamer opens its connections at once (up to 64 each): the default
    # listen backlog of 5 makes the kernel drop the rest, and the client's retries cost seconds.
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        """A client that hung up mid-response (the streamer cancels on errors) is not worth a traceback in
        vLLM's log; anything else gets one line."""
        error = sys.exc_info()[1]
        if not isinstance(error, (BrokenPipeError, ConnectionResetError)):
            print(f"warmstart node-copy endpoint: {type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str,
        folder: Path,
        verified: dict[str, Identity] | None = None,
        port: int = 0,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """Serves the files of `verified` (the agent's marker), each only while it is still that file; without it
        (tests, tools), the folder's files as they are now."""
        self.bucket = bucket
        self.prefix = prefix
        self.folder = folder
        table = (
            verified
            if verified is not None
            else {k: tuple(v) for k, v in record_identities(str(folder), strict=False).items()}
        )
        self.objects = _objects(prefix, table)
        self.keys = sorted(self.objects)
        # A thread per connection, up to the cap; past it, 503 SlowDown (the streamer retries) and the connection
        # closes, unless a connection that waits for a request gives its slot up.
        self.guard = ConnectionGuard(max_connections)
        self.busy_reply = _BUSY
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


_BUSY_BODY = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>busy</Message></Error>'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class _Handler(GuardedRequestHandler):
    protocol_version = "HTTP/1.1"
    server: NodeCopyServer
    timeout = IDLE_SECONDS  # socket timeout: an idle or stalled connection ends its thread

    def log_message(self, format, *args) -> None:  # the streamer makes thousands of requests: stay quiet
        pass

    _answered = False  # set once the connection has answered a request

    def handle_one_request(self) -> None:
        if self._answered:  # a kept-alive connection waits for its next request
            self.server.guard.waiting(self.connection, seconds=IDLE_SECONDS)
        self._answered = True
        super().handle_one_request()

    @property
    def serving_seconds(self) -> float:  # read at each request (tests shorten it)
        return RESPONSE_SECONDS

    # ---- routing ----

    def _target(self) -> tuple[str, str, dict[str, str]]:
        parsed = urllib.parse.urlsplit(self.path)
        bucket, _, key = urllib.parse.unquote(parsed.path.lstrip("/")).partition("/")
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        return bucket, key, query

    def _route(self, head: bool) -> None:
        bucket, key, query = self._target()
        if bucket != self.server.bucket:
            return self._error(404, "NoSuchBucket", f"this endpoint serves only {self.server.bucket}", head)
        if not key:
            if query.get("list-type") == "2":
                return self._list(query, head)
            return self._error(400, "InvalidRequest", "only ListObjectsV2 is served on the bucket", head)
        item = self.server.objects.get(key)
        if item is None:
            return self._error(404, "NoSuchKey", key, head)
        self._object(item, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def _refuse_write(self) -> None:
        """Read-only: refused without reading a byte of the body (whatever length it claims, even -1), and the
        connection closes, so an unread body never becomes the next request."""
        self.close_connection = True
        self._error(403, "AccessDenied", "this endpoint is read-only", False)

    do_PUT = do_POST = do_DELETE = _refuse_write

    # ---- answers ----

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _object(self, item: ServedObject, head: bool) -> None:
        start, end = 0, item.size - 1
        status = 200
        wanted = self.headers.get("Range")
        if wanted:
            match = _RANGE.match(wanted.strip())
            if not match or (not match.group(1) and not match.group(2)):
                return self._error(416, "InvalidRange", wanted, head)
            first, last = match.group(1), match.group(2)
            if first:
                start = int(first)
                end = min(int(last), item.size - 1) if last else item.size - 1
            else:  # suffix range: the last N bytes
                start, end = max(0, item.size - int(last)), item.size - 1
            if start >= item.size or start > end:
                return self._error(416, "InvalidRange", wanted, head)
            status = 206
        length = end - start + 1 if item.size else 0
        # The bytes served are the file the agent verified: reached without a link, the same inode, size, times and
        # link count (an in-place rewrite, a replacement, a hard link or a swapped folder is refused).
        descriptor = open_verified(str(self.server.folder), item.relative, item.identity)
        if descriptor is None:
            return self._error(500, "InternalError", f"{item.key} is not the file the agent verified", head)
        with os.fdopen(descriptor, "rb") as handle:
            self._send_range(item, handle, status, start, end, length, head)

    def _send_range(self, item: ServedObject, handle, status: int, start: int, end: int, length: int, head: bool):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", item.etag)
        self.send_header("Last-Modified", formatdate(item.mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{item.size}")
        self.end_headers()
        if head or length == 0:
            return
        self.wfile.flush()
        self.server.guard.serving(self.connection, seconds=RESPONSE_SECONDS + length / MIN_READ_RATE)
        # socket.sendfile, not os.sendfile: the connection has a timeout (IDLE_SECONDS), so its descriptor is
        # non-blocking, and a bare os.sendfile raises EAGAIN whenever the client is slower than the disk (the
        # streamer saw a failed request and retried). socket.sendfile waits for room within the timeout.
        sent = self.connection.sendfile(handle, start, length)
        if sent != length:
            raise ConnectionError(f"{item.key}: file ended at {start + sent}, expected {end + 1}")

    def _list(self, query: dict[str, str], head: bool) -> None:
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        asked = query.get("max-keys") or "1000"
        if not asked.isdigit():  # S3: a negative or non-numeric max-keys is InvalidArgument
            return self._error(400, "InvalidArgument", "max-keys must be a whole number", head)
        max_keys = min(int(asked), 1000)
        after, skip_folder = query.get("start-after", ""), False
        if query.get("continuation-token"):
            resumed = _resume(query["continuation-token"])
            if resumed is None:
                return self._error(400, "InvalidArgument", "the continuation token is not one this endpoint gave", head)
            after, skip_folder = resumed
        encode = query.get("encoding-type") == "url"
        contents: list = []
        common: list[str] = []
        truncated, last = False, ("", False)
        for key in self.server.keys:
            if not key.startswith(prefix) or key <= after or (skip_folder and key.startswith(after)):
                continue
            if delimiter and delimiter in key[len(prefix) :]:
                folder = prefix + key[len(prefix) :].split(delimiter, 1)[0] + delimiter
                if common and common[-1] == folder:
                    continue
                entry = ("prefix", folder)
            else:
                entry = ("key", key)
            if len(contents) + len(common) == max_keys:
                # max-keys=0 asks for nothing and is never truncated (as S3 answers): a token here would name
                # no key and restart the listing, and a paging client would loop forever.
                truncated = max_keys > 0
                break
            if entry[0] == "prefix":
                common.append(entry[1])
                last = (entry[1], True)  # resume after everything under this folder
            else:
                contents.append(self.server.objects[key])
                last = (key, False)
        name = lambda text: urllib.parse.quote(text, safe="/") if encode else escape(text)  # noqa: E731
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            f"<Name>{escape(self.server.bucket)}</Name><Prefix>{name(prefix)}</Prefix>",
            f"<KeyCount>{len(contents) + len(common)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        ]
        if delimiter:
            parts.append(f"<Delimiter>{name(delimiter)}</Delimiter>")
        if encode:
            parts.append("<EncodingType>url</EncodingType>")
        if truncated:
            parts.append(f"<NextContinuationToken>{_token(*last)}</NextContinuationToken>")
        for item in contents:
            iso = _iso(item.mtime)
            parts.append(
                f"<Contents><Key>{name(item.key)}</Key><LastModified>{iso}</LastModified>"
                f"<ETag>{escape(item.etag)}</ETag><Size>{item.size}</Size>"
                f"<StorageClass>STANDARD</StorageClass></Contents>"
            )
        for folder in common:
            parts.append(f"<CommonPrefixes><Prefix>{name(folder)}</Prefix></CommonPrefixes>")
        parts.append("</ListBucketResult>")
        body = "".join(parts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))


def _token(after: str, folder: bool) -> str:
    """Opaque, as S3's are: a key may hold characters XML cannot carry."""
    return base64.urlsafe_b64encode(json.dumps([after, folder]).encode()).decode()


def _resume(token: str) -> tuple[str, bool] | None:
    try:
        after, folder = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        return None
    if not isinstance(after, str) or not isinstance(folder, bool) or not after:
        return None
    return after, folder


def serve_in_background(*, bucket: str, prefix: str, folder: Path) -> NodeCopyServer:
    """Starts the endpoint on a free loopback port in a daemon thread (tests and benchmarks)."""
    server = NodeCopyServer(bucket=bucket, prefix=prefix, folder=folder)
    threading.Thread(target=server.serve_forever, name="node-copy-s3", daemon=True).start()
    return server
