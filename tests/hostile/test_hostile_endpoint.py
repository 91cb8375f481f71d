"""The node-copy endpoint (model_workload/runtime/node_copy_s3.py) against clients that misbehave: it never hangs
on a request, never keeps a thread per silent connection past its timeout, never serves more connections than
its cap, answers every listing so that a paging client ends, and never serves bytes other than the file the
agent verified."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree

import pytest

from model_workload.runtime import node_copy_s3
from model_workload.runtime.node_copy_s3 import NodeCopyServer, serve_in_background

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "copy"
    folder.mkdir()
    for index in range(5):
        (folder / f"shard-{index}.safetensors").write_bytes(bytes([index]) * 1000)
    server = serve_in_background(bucket="models", prefix="llama/", folder=folder)
    yield server, folder
    server.shutdown()
    server.server_close()


def _raw(server: NodeCopyServer, request: bytes, *, timeout: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=timeout) as connection:
        connection.sendall(request)
        chunks = []
        while True:
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("length", [b"-1", b"999999999999", b"abc"])
def test_a_write_is_refused_at_once_whatever_length_it_claims(served, length):
    """The P2: a PUT with Content-Length -1 hung a handler reading a body that never ends."""
    server, _ = served
    started = time.monotonic()
    answer = _raw(server, b"PUT /models/llama/x HTTP/1.1\r\nHost: a\r\nContent-Length: " + length + b"\r\n\r\n")
    assert time.monotonic() - started < 2
    assert answer.startswith(b"HTTP/1.1 403") and b"AccessDenied" in answer and b"Connection: close" in answer


def _list(server, **query) -> tuple[int, ElementTree.Element]:
    url = f"{server.endpoint}/models?" + "&".join(
        f"{k.replace('_', '-')}={v}" for k, v in {"list_type": 2, **query}.items()
    )
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, ElementTree.fromstring(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, ElementTree.fromstring(error.read())


def test_max_keys_zero_ends_the_listing_and_bad_paging_input_is_refused(served):
    """The P2: max-keys=0 gave a token that restarted the listing, so a paging client looped forever."""
    server, _ = served
    status, body = _list(server, max_keys=0)
    assert status == 200 and body.find(f"{NS}IsTruncated").text == "false"
    assert body.find(f"{NS}NextContinuationToken") is None and body.find(f"{NS}KeyCount").text == "0"
    for query in ({"max_keys": -1}, {"max_keys": "many"}, {"continuation_token": "bm90LWpzb24"}):
        status, body = _list(server, **query)
        assert status == 400 and body.find("Code").text == "InvalidArgument", query
    # A paging client walks every key once and stops.
    seen, token, pages = [], None, 0
    while pages < 20:
        status, body = _list(server, max_keys=2, **({"continuation_token": token} if token else {}))
        seen += [c.find(f"{NS}Key").text for c in body.findall(f"{NS}Contents")]
        pages += 1
        if body.find(f"{NS}IsTruncated").text != "true":
            break
        token = body.find(f"{NS}NextContinuationToken").text
    assert pages == 3 and len(seen) == 5 == len(set(seen))


def test_a_silent_connection_is_closed_and_connections_beyond_the_cap_are_told_to_slow_down(tmp_path, monkeypatch):
    """The P2: a thread per idle connection, forever."""
    monkeypatch.setattr(node_copy_s3._Handler, "timeout", 1)
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "a").write_bytes(b"x")
    server = NodeCopyServer(bucket="models", prefix="llama/", folder=folder, max_connections=4)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        idle = [socket.create_connection(("127.0.0.1", server.server_address[1])) for _ in range(4)]
        time.sleep(0.3)
        answer = _raw(server, b"GET /models/llama/a HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"SlowDown" in answer
        for connection in idle:  # closed by the endpoint once they said nothing for its timeout
            connection.settimeout(5)
            assert connection.recv(10) == b""
            connection.close()
        time.sleep(0.3)
        answer = _raw(server, b"GET /models/llama/a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"x")
    finally:
        server.shutdown()
        server.server_close()


def test_a_file_that_changed_since_it_was_listed_is_not_served(served):
    """Served bytes are the agent's verified file: the same size as listed and not a link (the pods mount the
    copy read-only and only the agent writes it, so only a bug could change it)."""
    server, folder = served
    (folder / "shard-1.safetensors").write_bytes(b"tampered" * 1000)
    (folder / "shard-2.safetensors").unlink()
    (folder / "shard-2.safetensors").symlink_to("/etc/hostname")
    for name in ("shard-1", "shard-2"):
        request = urllib.request.Request(f"{server.endpoint}/models/llama/{name}.safetensors")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 500
    with urllib.request.urlopen(f"{server.endpoint}/models/llama/shard-3.safetensors", timeout=5) as answer:
        assert answer.read() == bytes([3]) * 1000


def test_the_entry_step_refuses_a_copy_other_than_the_agent_verified(tmp_path):
    """The completion marker says how many files and bytes the agent verified: a folder that holds more is not
    served, and the pod streams from S3."""
    import json

    from model_workload.runtime.vllm_entry import start_node_copy_endpoint

    root = tmp_path / "weights" / "llama"
    (root / "0123456789abcdef").mkdir(parents=True)
    (root / "0123456789abcdef" / "config.json").write_text("{}")
    (root / "0123456789abcdef.complete").write_text(json.dumps({"files": 1, "bytes": 2}))
    (root / "0123456789abcdef" / "planted.json").write_text("{}")
    with pytest.raises(OSError, match="not what the agent verified"):
        start_node_copy_endpoint("models", "llama/", root / "0123456789abcdef")
