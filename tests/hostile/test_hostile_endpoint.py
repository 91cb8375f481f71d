"""The node-copy endpoint (model_workload/runtime/node_copy_s3.py) against clients that misbehave: it never hangs
on a request, never keeps a thread per silent connection past its timeout, never serves more connections than
its cap, answers every listing so that a paging client ends, and never serves bytes other than the file the
agent verified."""

from __future__ import annotations

import os
import socket
import threading
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


def _small_server(tmp_path, max_connections: int) -> NodeCopyServer:
    folder = tmp_path / "copy"
    folder.mkdir(exist_ok=True)
    (folder / "a").write_bytes(b"x")
    with (folder / "big").open("wb") as handle:  # sparse: 64 MiB of zeros, more than the socket buffers hold
        handle.truncate(64 * 2**20)
    server = NodeCopyServer(bucket="models", prefix="llama/", folder=folder, max_connections=max_connections)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _connect(server: NodeCopyServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5)


def _closed_by_the_endpoint(connection: socket.socket, within: float) -> bool:
    connection.settimeout(within)
    try:
        while connection.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _trickled_seconds(trickle: socket.socket) -> float:
    """How long a client that sends a byte every 0.3 s (every read within the socket timeout) stays connected."""
    started = time.monotonic()
    while time.monotonic() - started < 8:
        try:
            trickle.sendall(b"G")
        except OSError:
            return time.monotonic() - started
        time.sleep(0.3)
    return time.monotonic() - started if _closed_by_the_endpoint(trickle, within=1) else float("inf")


def test_connections_beyond_the_cap_are_told_to_slow_down_while_every_slot_is_fresh(tmp_path, monkeypatch):
    """The P2 of issue 22: a thread per idle connection, forever. Connections that have just started their request
    keep their slots (a client sends as soon as it connects); past the cap a newcomer gets 503 SlowDown at once."""
    server = _small_server(tmp_path, max_connections=4)
    try:
        busy = [_connect(server) for _ in range(4)]
        for connection in busy:  # a request line, its headers still to come
            connection.sendall(b"GET /models/llama/a HTTP/1.1\r\n")
        time.sleep(0.3)
        answer = _raw(server, b"GET /models/llama/a HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"SlowDown" in answer
        for connection in busy:
            connection.close()
    finally:
        server.shutdown()
        server.server_close()


def test_half_open_connections_cannot_lock_requests_out(tmp_path):
    """Issue 45: 1,100 half-open connections made legitimate requests get 503 for 29 s. A connection that waits
    for its request gives its slot to a newcomer once every slot is taken."""
    server = _small_server(tmp_path, max_connections=50)
    try:
        silent = [_connect(server) for _ in range(60)]
        time.sleep(1.2)  # past EVICT_AFTER_SECONDS: a client sends its request as soon as it connects
        started = time.monotonic()
        answer = _raw(server, b"GET /models/llama/a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"x")
        assert time.monotonic() - started < 3
        for connection in silent:
            connection.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_slow_sender_and_a_slow_reader_are_cut_off_at_their_stated_times(tmp_path, monkeypatch):
    """Issue 45: a socket timeout bounds each silence, not a peer that sends (or reads) a byte at a time."""
    monkeypatch.setattr(node_copy_s3, "HEAD_SECONDS", 1)
    monkeypatch.setattr(node_copy_s3, "RESPONSE_SECONDS", 1)
    monkeypatch.setattr(node_copy_s3, "MIN_READ_RATE", 2**40)
    monkeypatch.setattr(NodeCopyServer, "head_seconds", 1)
    server = _small_server(tmp_path, max_connections=8)
    try:
        assert _trickled_seconds(_connect(server)) < 6
        reader = _connect(server)
        reader.sendall(b"GET /models/llama/big HTTP/1.1\r\nHost: a\r\n\r\n")
        time.sleep(3)  # reads nothing: the 64 MiB answer stalls once the socket buffers are full
        received = 0
        reader.settimeout(5)
        while chunk := reader.recv(2**20):  # what was buffered, then the end: the endpoint closed it
            received += len(chunk)
        assert received < 64 * 2**20
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


def _verified_copy(tmp_path, *, identity: bool = True):
    """A copy as the agent leaves it: two shards and a config, and its completion marker."""
    import json

    from contracts.file_identity import record_identities

    copy = tmp_path / "weights" / "llama" / "0123456789abcdef"
    (copy / "sub").mkdir(parents=True)
    for name in ("model-1.safetensors", "model-2.safetensors"):
        (copy / name).write_bytes(name.encode() * 1000)
    (copy / "sub" / "config.json").write_text("{}")
    marker = {"key": copy.name, "files": 3, "bytes": 0, "boot_id": "x"}
    if identity:
        marker["identity"] = record_identities(str(copy))
    copy.with_name(copy.name + ".complete").write_text(json.dumps(marker))
    return copy


def _tamper(copy, how: str) -> None:
    shard = copy / "model-1.safetensors"
    if how == "a same-size rewrite in place":
        with shard.open("r+b") as handle:
            handle.write(b"X" * 10)
    elif how == "a hard link":
        os.link(shard, copy.parent / "elsewhere")
    elif how == "a same-size replacement":
        replacement = copy / "r"
        replacement.write_bytes(shard.read_bytes())
        os.replace(replacement, shard)
    elif how == "a shard swapped for a link and a pad file":
        data = shard.read_bytes()
        shard.unlink()
        shard.symlink_to("/etc/hostname")
        (copy / "pad").write_bytes(data)
    elif how == "a folder swapped for a link":
        real = copy.parent / "real-sub"
        os.rename(copy / "sub", real)
        (copy / "sub").symlink_to(real)
    elif how == "a planted file":
        (copy / "planted.json").write_text("{}")


TAMPERING = [
    "a same-size rewrite in place",
    "a hard link",
    "a same-size replacement",
    "a shard swapped for a link and a pad file",
    "a folder swapped for a link",
    "a planted file",
]


@pytest.mark.parametrize("how", TAMPERING)
def test_the_entry_step_and_the_plugin_refuse_a_copy_that_is_not_the_one_verified(tmp_path, monkeypatch, how):
    """Issue 45: the endpoint and the plugin compared counts and sizes only, so a same-size rewrite (under the old
    ETag), a hard link, a sparse replacement or a swapped folder was served, and a shard replaced by a link beside
    a pad file of its size was silently left out of the stream. Each file is now the one the agent recorded."""
    from model_workload.runtime import node_copy_loader
    from model_workload.runtime.vllm_entry import start_node_copy_endpoint

    copy = _verified_copy(tmp_path)
    env = {node_copy_loader.FOLDER_VARIABLE: str(copy), node_copy_loader.MODEL_VARIABLE: "s3://models/llama/"}
    assert node_copy_loader.node_copy_files("s3://models/llama/", env)  # untouched: streamed from the copy
    _tamper(copy, how)
    assert node_copy_loader.node_copy_files("s3://models/llama/", env) is None
    with pytest.raises(OSError, match="not the one the agent verified"):
        start_node_copy_endpoint("models", "llama/", copy)


@pytest.mark.parametrize("how", TAMPERING[:5])
def test_the_endpoint_refuses_a_file_changed_after_it_started(tmp_path, how):
    """The endpoint serves for the pod's life: a file changed after the entry step checked is refused at open."""
    import json

    from contracts.file_identity import identities

    copy = _verified_copy(tmp_path)
    marker = json.loads(copy.with_name(copy.name + ".complete").read_text())
    server = NodeCopyServer(bucket="models", prefix="llama/", folder=copy, verified=identities(marker))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _tamper(copy, how)
        name = "sub/config.json" if how == "a folder swapped for a link" else "model-1.safetensors"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.endpoint}/models/llama/{name}", timeout=5)
        assert refused.value.code == 500
        with urllib.request.urlopen(f"{server.endpoint}/models/llama/model-2.safetensors", timeout=5) as answer:
            assert answer.read() == b"model-2.safetensors" * 1000
    finally:
        server.shutdown()
        server.server_close()


def test_a_marker_without_identities_vouches_for_nothing(tmp_path):
    """A marker of an earlier agent lists no identities: the pods stream from S3 until the agent fills the copy
    again (node_agent/runtime/weights.py read_marker)."""
    from model_workload.runtime.vllm_entry import start_node_copy_endpoint

    copy = _verified_copy(tmp_path, identity=False)
    with pytest.raises(OSError, match="not the one the agent verified"):
        start_node_copy_endpoint("models", "llama/", copy)


def test_the_endpoint_the_entry_step_forks_keeps_its_stated_times(tmp_path, monkeypatch):
    """From the first-cluster review: the guard's deadline thread was started when the server was built, before
    the entry step forks the process that serves; the child had no such thread, so a trickling client was never
    cut off. The thread is now started in the serving process."""
    from model_workload.runtime import vllm_entry
    from model_workload.runtime.vllm_entry import start_node_copy_endpoint

    vllm_entry._siblings()  # the entry step imports the endpoint as the pod does: a module beside it
    import node_copy_s3 as beside

    monkeypatch.setattr(beside.NodeCopyServer, "head_seconds", 1)
    copy = _verified_copy(tmp_path)
    endpoint = start_node_copy_endpoint("models", "llama/", copy)
    host, port = endpoint.removeprefix("http://").split(":")
    assert _trickled_seconds(socket.create_connection((host, int(port)), timeout=5)) < 6
