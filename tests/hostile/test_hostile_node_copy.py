"""Issue 45: a node copy stays what was verified on the agent's failure paths. After an agent crash between
publication and sync the copy was withdrawn and its folder replaced while a pod read it (the in-use check was
skipped on that path); a full disk while writing the pointer raised out of the weights loop, and the verified copy
was downloaded again. Against SeaweedFS, the real NodeCopies."""

from __future__ import annotations

import errno

from node_agent.runtime import weights as weights_module
from tests.agent.weights_world import MODEL, PREFIX, S3_URI, _cache_in_boot, _published_never_synced, never_in_use
from tests.hostile.hostile_world import tree_state


def _inodes(folder) -> dict[str, int]:
    return {path.name: path.stat().st_ino for path in folder.rglob("*") if path.is_file()}


def test_a_withdrawn_copy_a_pod_reads_is_not_replaced_under_it(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    bucket, files = model_bucket
    cache, key = _published_never_synced(tmp_path / "weights", s3_server, bucket, clock, log, monkeypatch)
    folder = cache.layout.key_dir(MODEL, key)
    before, inodes = tree_state(folder), _inodes(folder)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, lambda model, k: (model, k) == (MODEL, key))  # a pod reads it
    assert outcome.status == "busy" and "read by a pod" in outcome.reason
    assert tree_state(folder) == before and _inodes(folder) == inodes  # the same files, not copies of them
    assert cache.layout.read_pointer(MODEL) is None  # withdrawn: no new pod chooses it
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "downloaded"  # once no pod reads it


def test_a_full_disk_at_the_pointer_keeps_the_verified_copy(tmp_path, s3_server, model_bucket, clock, log, monkeypatch):
    bucket, _ = model_bucket
    monkeypatch.setattr(weights_module, "syncfs", lambda descriptor: None)
    cache = _cache_in_boot(tmp_path / "weights", s3_server.client(), bucket, clock, log, "boot-a")
    real_write = weights_module.write_atomic
    full = {"on": True}

    def write_atomic(path, data, **kwargs):
        if full["on"] and path == cache.layout.pointer(MODEL):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data, **kwargs)

    monkeypatch.setattr(weights_module, "write_atomic", write_atomic)
    downloads = []
    real_download = cache.source.download_all
    monkeypatch.setattr(cache.source, "download_all", lambda *a, **k: downloads.append(1) or real_download(*a, **k))
    first = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)  # downloaded, verified: its pointer fails
    assert first.status == "downloaded" and cache.layout.complete_marker(MODEL, first.key).exists()
    assert any(e["event"] == "weights-pointer-failed" for e in log.events)
    again = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)  # still full: no raise, the copy is kept
    assert again.status == "failed" and "copy is kept" in again.reason
    full["on"] = False
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "ready"
    assert len(downloads) == 1 and cache.layout.read_pointer(MODEL)["key"] == first.key


def _as_an_earlier_agent_left_it(cache, key) -> None:
    import json

    marker = cache.layout.complete_marker(MODEL, key)
    document = json.loads(marker.read_text())
    del document["identity"]
    marker.write_text(json.dumps(document))


def test_an_earlier_agents_copy_gets_its_identities_without_a_download(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    """From the first-cluster review: after the upgrade, a copy an earlier agent verified was no longer served, and
    while a pod read it every new pod streamed from S3. It keeps its identities if it holds what that agent
    counted; one that holds more is filled again once no pod reads it."""
    bucket, _ = model_bucket
    monkeypatch.setattr(weights_module, "syncfs", lambda descriptor: None)
    cache = _cache_in_boot(tmp_path / "weights", s3_server.client(), bucket, clock, log, "boot-a")
    key = cache.sync(MODEL, S3_URI, PREFIX, never_in_use).key
    _as_an_earlier_agent_left_it(cache, key)
    folder = cache.layout.key_dir(MODEL, key)
    inodes = _inodes(folder)
    assert cache.sync(MODEL, S3_URI, PREFIX, lambda m, k: True).status == "ready"  # in use: upgraded in place
    assert _inodes(folder) == inodes and cache.layout.is_complete(MODEL, key)
    _as_an_earlier_agent_left_it(cache, key)
    (folder / "planted.safetensors").write_bytes(b"x")  # more than that agent counted
    assert cache.sync(MODEL, S3_URI, PREFIX, lambda m, k: True).status == "busy"
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "downloaded"
    assert not (folder / "planted.safetensors").exists()
