"""Pruning 20,000 compile-cache objects of which 90% are stale, on a local S3 server, 5 times.

S3 requests the pruner makes versus the minimum possible (ceil(listed/1000) lists + ceil(deleted/1000)
deletes), and its wall time versus a bare reference that does only those minimal requests (list
everything, batch-delete the known stale objects) on an identical copy of the bucket: 5 interleaved pairs
(the order alternating), each on buckets of their own, the ratio with its spread and the machine's load.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from bench import report  # noqa: E402
from pruner.runtime.aws import PrunerAws  # noqa: E402
from pruner.runtime.pruner import Settings, run  # noqa: E402
from tests.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3  # noqa: E402

TOTAL, STALE_SHARE, PAIRS = 20_000, 0.9, 5
PARAMETER = "/warmstart/bench/compile-cache/active-keys"


class ActiveSetParameter:
    """The one SSM call the pruner makes (no SSM server here)."""

    def __init__(self, value: str) -> None:
        self.value = value

    def get_parameter(self, Name: str) -> dict:
        return {"Parameter": {"Name": Name, "Value": self.value}}


def counting_client(server: SeaweedS3, counter: Counter):
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            max_pool_connections=32,
            retries={"mode": "standard", "max_attempts": 3},
            request_checksum_calculation="when_required",
        ),
    )
    client.meta.events.register("before-send.s3.*", lambda event_name, **_: counter.update([event_name.split(".")[-1]]))
    return client


def key(group: str, index: int) -> str:
    return f"compile-cache/{group}/h100-sm_90/tp2-pp1/torch2.11.0/{index:020x}/"


def objects_of(prefix: str) -> list[str]:
    return [f"{prefix}archive-{'e' * 64}.tar.zst", f"{prefix}last-use.json", f"{prefix}manifest-0123456789abcdef.json"]


def load(server: SeaweedS3, buckets: list[str], keys: list[str]) -> None:
    loader = counting_client(server, Counter())
    with ThreadPoolExecutor(24) as pool:
        list(
            pool.map(
                lambda item: loader.put_object(Bucket=item[0], Key=item[1], Body=b""),
                ((b, k) for b in buckets for k in keys),
            )
        )


def prune_once(
    server: SeaweedS3, bucket: str, active_keys: list[str], later: datetime
) -> tuple[float, Counter, object]:
    requests: Counter = Counter()
    aws = PrunerAws(
        counting_client(server, requests),
        ActiveSetParameter(json.dumps({"version": 1, "keys": active_keys})),
        bucket,
    )
    settings = Settings(
        active_set_parameters=(PARAMETER,),
        retention=timedelta(days=14),
        orphan_age=timedelta(days=1),
        max_deletions=TOTAL,
        dry_run=False,
    )
    seconds, summary = report.timed(lambda: run(aws, settings, lambda: later, lambda record: None))
    return seconds, requests, summary


def reference_once(server: SeaweedS3, bucket: str, stale: list[str]) -> tuple[float, Counter]:
    """Only the minimal requests: list everything, batch-delete the stale objects it already knows."""
    requests: Counter = Counter()
    reference = counting_client(server, requests)

    def reference_run() -> None:
        listed = [
            o["Key"]
            for page in reference.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="compile-cache/")
            for o in page.get("Contents", [])
        ]
        doomed = set(stale)
        chosen = [k for k in listed if k in doomed]
        for i in range(0, len(chosen), 1000):
            reference.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chosen[i : i + 1000]], "Quiet": True}
            )

    seconds, _ = report.timed(reference_run)
    return seconds, requests


def main() -> None:
    stale_keys = [key("stale", i) for i in range(int(TOTAL * STALE_SHARE) // 3)]
    active_keys = [key("active", i) for i in range((TOTAL - 3 * len(stale_keys)) // 3)]
    stale = [o for p in stale_keys for o in objects_of(p)]
    everything = stale + [o for p in active_keys for o in objects_of(p)]
    everything += [f"compile-cache/unexpected/{i}" for i in range(TOTAL - len(everything))]
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-"))
    server = SeaweedS3(work / "s3").start()
    pruner_times: list[float] = []
    reference_times: list[float] = []
    try:
        pairs = [(server.new_bucket(), server.new_bucket()) for _ in range(PAIRS)]
        load_s, _ = report.timed(lambda: load(server, [b for pair in pairs for b in pair], everything))
        later = datetime.now(UTC) + timedelta(days=30)
        load_before = report.machine_load()
        for attempt, (pruner_bucket, reference_bucket) in enumerate(pairs):
            for side in ("pruner", "reference") if attempt % 2 == 0 else ("reference", "pruner"):
                if side == "pruner":
                    seconds, requests, summary = prune_once(server, pruner_bucket, active_keys, later)
                    assert summary.deleted_objects == len(stale), summary
                    pruner_times.append(seconds)
                else:
                    seconds, reference_requests = reference_once(server, reference_bucket, stale)
                    reference_times.append(seconds)
        load_after = report.machine_load()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    minimum = math.ceil(len(everything) / 1000) + math.ceil(len(stale) / 1000)
    made = sum(requests.values())
    ratio = report.paired_ratio(pruner_times, reference_times)
    figures = {
        "objects": len(everything),
        "stale_objects": len(stale),
        "deleted_objects": summary.deleted_objects,
        "requests_by_operation": dict(requests),
        "requests": made,
        "minimum_requests": minimum,
        "requests_over_minimum": made / minimum,
        "pruner_s": report.median(pruner_times),
        "reference_s": report.median(reference_times),
        "pruner_over_reference_time": ratio,
        "reference_requests": sum(reference_requests.values()),
        "load_s": load_s,
        "load_before": load_before,
        "load_after": load_after,
    }
    print(f"prune {len(everything):,} objects, {len(stale):,} stale, on a local S3 server, {PAIRS} interleaved pairs")
    print(
        report.table(
            [{**figures, "pruner_over_reference_time": ratio["ratio"]}],
            [
                "objects",
                "deleted_objects",
                "requests",
                "minimum_requests",
                "requests_over_minimum",
                "pruner_s",
                "reference_s",
                "pruner_over_reference_time",
            ],
        )
    )
    print(report.said("pruner/reference time", ratio))
    print("requests by operation:", dict(requests))
    print(f"load before {load_before['load_1m']:.2f}, after {load_after['load_1m']:.2f}")
    print("wrote", report.write("prune", figures))


if __name__ == "__main__":
    main()
