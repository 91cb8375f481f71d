"""Pruning 100,000 compile-cache objects of which 90% are stale, on a local S3 server.

S3 requests the pruner makes versus the minimum possible (ceil(listed/1000) lists + ceil(deleted/1000)
deletes), and its wall time versus a bare reference that does only those minimal requests (list
everything, batch-delete the known stale objects) on an identical copy of the bucket, in the same run.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
import time
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

TOTAL, STALE_SHARE = 100_000, 0.9
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


def main() -> None:
    stale_keys = [key("stale", i) for i in range(int(TOTAL * STALE_SHARE) // 3)]
    active_keys = [key("active", i) for i in range((TOTAL - 3 * len(stale_keys)) // 3)]
    stale = [o for p in stale_keys for o in objects_of(p)]
    everything = stale + [o for p in active_keys for o in objects_of(p)]
    everything += [f"compile-cache/unexpected/{i}" for i in range(TOTAL - len(everything))]
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-"))
    server = SeaweedS3(work / "s3").start()
    try:
        loader = counting_client(server, Counter())
        buckets = {"pruner": server.new_bucket(), "reference": server.new_bucket()}
        started = time.perf_counter()
        with ThreadPoolExecutor(24) as pool:
            list(
                pool.map(
                    lambda item: loader.put_object(Bucket=item[0], Key=item[1], Body=b""),
                    ((b, k) for b in buckets.values() for k in everything),
                )
            )
        load_s = time.perf_counter() - started
        later = datetime.now(UTC) + timedelta(days=30)

        requests: Counter = Counter()
        aws = PrunerAws(
            counting_client(server, requests),
            ActiveSetParameter(json.dumps({"version": 1, "keys": active_keys})),
            buckets["pruner"],
        )
        settings = Settings(
            active_set_parameters=(PARAMETER,),
            retention=timedelta(days=14),
            orphan_age=timedelta(days=1),
            max_deletions=TOTAL,
            dry_run=False,
        )
        pruner_s, summary = report.timed(lambda: run(aws, settings, lambda: later, lambda record: None))

        reference_requests: Counter = Counter()
        reference = counting_client(server, reference_requests)

        def reference_run() -> None:
            listed = [
                o["Key"]
                for page in reference.get_paginator("list_objects_v2").paginate(
                    Bucket=buckets["reference"], Prefix="compile-cache/"
                )
                for o in page.get("Contents", [])
            ]
            doomed = set(stale)
            chosen = [k for k in listed if k in doomed]
            for i in range(0, len(chosen), 1000):
                reference.delete_objects(
                    Bucket=buckets["reference"],
                    Delete={"Objects": [{"Key": k} for k in chosen[i : i + 1000]], "Quiet": True},
                )

        reference_s, _ = report.timed(reference_run)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    minimum = math.ceil(len(everything) / 1000) + math.ceil(len(stale) / 1000)
    made = sum(requests.values())
    figures = {
        "objects": len(everything),
        "stale_objects": len(stale),
        "deleted_objects": summary.deleted_objects,
        "requests_by_operation": dict(requests),
        "requests": made,
        "minimum_requests": minimum,
        "requests_over_minimum": made / minimum,
        "pruner_s": pruner_s,
        "reference_s": reference_s,
        "pruner_over_reference_time": pruner_s / reference_s,
        "reference_requests": sum(reference_requests.values()),
        "load_s": load_s,
    }
    assert summary.deleted_objects == len(stale), summary
    print(f"prune {len(everything):,} objects, {len(stale):,} stale, on a local S3 server")
    print(
        report.table(
            [figures],
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
    print("requests by operation:", dict(requests))
    print("wrote", report.write("prune", figures))


if __name__ == "__main__":
    main()
