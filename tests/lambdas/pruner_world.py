"""A compile-cache bucket for the pruner, shared by its end-to-end tests and the hostile ones."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from pruner.runtime.pruner import Settings
from tests.lambdas.helpers import PARAMETER


def key(group: str, index: int) -> str:
    return f"compile-cache/{group}/h100-sm_90/tp2-pp1/torch2.11.0/{index:020x}/"


def put_all(client, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"{}"), keys))


def settings(retention: timedelta, orphan_age: timedelta, **overrides) -> Settings:
    return Settings(
        **{
            "active_set_parameters": (PARAMETER,),
            "retention": retention,
            "orphan_age": orphan_age,
            "max_deletions": 100_000,
            "dry_run": False,
            **overrides,
        }
    )


def full_key(prefix: str) -> list[str]:
    return [
        f"{prefix}archive-{'b' * 64}-0001.tar.zst",
        f"{prefix}last-use.json",
        f"{prefix}manifest-0123456789abcdef.json",
    ]


def _small_world(client, bucket, keys_per_group=40):
    active = [key("active", i) for i in range(keys_per_group)]
    stale = [key("stale", i) for i in range(keys_per_group)]
    put_all(client, bucket, [o for p in active + stale for o in full_key(p)])
    return active, stale
