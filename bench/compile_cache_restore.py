"""Restore of a compile-cache archive (15 MB and 500 MB) from a local S3 server, versus the plain way:
boto3's download_file of the same object, then zstd+tar extraction, in the same run, interleaved (the order
alternating), until the folder is in place (what the pod waits for). Each run starts with the page cache emptied
(report.drop_caches, where the kernel allows it): on this VM a run that followed the other side's ran up to 1.7x
slower, whichever tool it was, by what the run before had left in memory.

warmstart's restore does more work (manifest check, sha256 verification, atomic rename); the ratio shows
what that costs or saves. Ratio = warmstart time / plain time (below 1: warmstart is faster).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from contracts.cache_key import ModelFactors, compile_cache_key  # noqa: E402
from node_agent.runtime.archive import unpack  # noqa: E402
from node_agent.runtime.compile_cache import publish, restore  # noqa: E402
from node_agent.runtime.layout import NodeCacheLayout  # noqa: E402
from node_agent.runtime.log import EventLog  # noqa: E402
from node_agent.runtime.s3.compile_store import CacheStore  # noqa: E402
from tests.s3_server import SeaweedS3  # noqa: E402

# Pairs per archive size: a 15 MB restore takes a tenth of a second and moves by a third from pair to pair on
# a 2-core VM, so it gets many (seconds in all); a 500 MB pair takes about 5 s.
PAIRS = {15: 21, 500: 7}
if "BENCH_REPEATS" in os.environ:
    PAIRS = dict.fromkeys(PAIRS, int(os.environ["BENCH_REPEATS"]))
SIZES_MB = tuple(PAIRS)


def make_cache(folder: Path, total_mb: int, seed: int) -> None:
    """Incompressible files of mixed sizes, so the archive is about `total_mb` (the worst case to move)."""
    rng = random.Random(seed)
    remaining = total_mb * 10**6
    index = 0
    while remaining > 0:
        size = min(remaining, rng.choice([4_000, 60_000, 900_000, 8_000_000]))
        # Where vLLM 0.21.0 keeps Inductor's artifacts: inside its hash folder under VLLM_CACHE_ROOT.
        path = (
            folder / f"vllm/torch_compile_cache/0123456789/rank_0_0/inductor_cache/{index % 37:02x}/kernel_{index}.bin"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        remaining -= size
        index += 1


def factors(size_mb: int) -> ModelFactors:
    return ModelFactors(
        model=f"bench-{size_mb}mb",
        weights_revision="r1",
        image="vllm/vllm-openai:v0.21.0",
        torch_version="2.13.0",
        tensor_parallel=1,
        pipeline_parallel=1,
        max_model_len=8192,
        max_num_batched_tokens=None,
        dtype="auto",
        quantization=None,
        kv_cache_dtype="auto",
        compilation_config=None,
    )


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-"))
    server = SeaweedS3(work / "s3").start()
    log = EventLog(time.time, stream=open(os.devnull, "w"))
    rows, figures = [], {"pairs": PAIRS, "sizes": {}}
    try:
        bucket = server.new_bucket()
        client = server.client(retries=3)  # the plain way: boto3's client as a user has it
        # warmstart: the agent's own client (its pool, checksum and parsing settings), as on the nodes.
        agent_client = server.agent_client(connections=16)
        store = CacheStore(agent_client, bucket, part_bytes=16 * 2**20, threads=8)
        for size_mb in SIZES_MB:
            f = factors(size_mb)
            key = compile_cache_key(f, gpu="H100", architecture="sm_90")
            source = NodeCacheLayout(work / f"source-{size_mb}")
            make_cache(source.model_dir(f.model, f.fingerprint()), size_mb, seed=size_mb)
            publish_seconds, outcome = report.timed(
                lambda: publish(
                    store=store,
                    layout=source,
                    key=key,
                    model=f.model,
                    fingerprint=f.fingerprint(),
                    node="bench",
                    clock=time.time,
                    log=log,
                )
            )
            assert outcome.status == "published", outcome
            (manifest_name,) = store.list_keys(key.manifest_prefix)  # one publisher: one manifest
            manifest = store.get_json(manifest_name)
            ours, plain = [], []
            load_before = report.machine_load()
            cold = report.drop_caches()  # False: the kernel refused (not root); the runs then start warm
            for attempt in range(PAIRS[size_mb]):
                node = NodeCacheLayout(work / f"node-{size_mb}-{attempt}")
                target = work / f"plain-{size_mb}-{attempt}"
                target.mkdir()

                def plain_restore(target=target):
                    archive = target / "archive.tar.zst"
                    client.download_file(bucket, manifest["archive"], str(archive))
                    unpack(archive, target / "cache")
                    archive.unlink()

                if attempt % 2:  # the order alternates: neither side always runs first
                    report.drop_caches()  # untimed, before each run
                    seconds, _ = report.timed(plain_restore)
                    plain.append(seconds)
                report.drop_caches()
                seconds, restored = report.timed(
                    lambda: restore(
                        store=store,
                        layout=node,
                        key=key,
                        model=f.model,
                        fingerprint=f.fingerprint(),
                        node="bench",
                        clock=time.time,
                        log=log,
                        touch=False,  # the agent records the last use after the marker its pods wait for
                    )
                )
                assert restored.status == "restored", restored
                ours.append(seconds)
                if not attempt % 2:
                    report.drop_caches()  # untimed, before each run
                    seconds, _ = report.timed(plain_restore)
                    plain.append(seconds)
                shutil.rmtree(node.root, ignore_errors=True)
                shutil.rmtree(target, ignore_errors=True)
            row = {
                "archive_mb": round(manifest["size"] / 1e6, 1),
                "files": manifest["files"],
                "publish_s": publish_seconds,
                "warmstart_restore_s": report.median(ours),
                "plain_download_untar_s": report.median(plain),
                "ratio": report.median(ours) / report.median(plain),
                "ratio_spread": report.paired_ratio(ours, plain),
                "load_before": load_before,
                "load_after": report.machine_load(),
                "page_cache_dropped_before_each_run": cold,
                "warmstart_mb_per_s": manifest["size"] / 1e6 / report.median(ours),
            }
            rows.append(row)
            figures["sizes"][f"{size_mb}MB"] = {**row, "warmstart_runs_s": ours, "plain_runs_s": plain}
            shutil.rmtree(source.root, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("compile-cache restore: warmstart (verified, atomic) vs plain download + untar, pairs per size:", PAIRS)
    print(
        report.table(
            rows,
            [
                "archive_mb",
                "files",
                "publish_s",
                "warmstart_restore_s",
                "plain_download_untar_s",
                "ratio",
                "warmstart_mb_per_s",
            ],
        )
    )
    for row in rows:
        print(report.said(f"{row['archive_mb']} MB: warmstart/plain time", row["ratio_spread"]))
    print("wrote", report.write("compile_cache_restore", figures))


if __name__ == "__main__":
    main()
