"""The pruner's report of each run it holds the lock for (contracts/pruner_report.py), on the real S3 server: what
the node agents read into the metrics behind the WarmstartPrunerFailing and WarmstartPrunerNotRunning alerts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from contracts.pruner_report import PRUNER_REPORT_KEY, parse_report
from pruner.runtime.aws import PrunerAws
from pruner.runtime.pruner import ActiveSetUnavailable, run
from tests.lambdas.helpers import PARAMETER, StandInSsm, fast_client
from tests.lambdas.pruner_world import _small_world, settings

LATER = datetime(2026, 12, 20, 3, 0, tzinfo=UTC)


def _report(client, bucket: str):
    body = client.get_object(Bucket=bucket, Key=PRUNER_REPORT_KEY)["Body"].read()
    return parse_report(json.loads(body))


def test_a_run_that_pruned_reports_it_with_its_end(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, _ = _small_world(client, bucket, keys_per_group=5)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    run(PrunerAws(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)), lambda: LATER, lambda r: None)
    report = _report(client, bucket)
    assert report is not None and report.ok and report.finished_at == LATER.timestamp()


def test_a_run_without_its_active_set_reports_that_it_pruned_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    _small_world(client, bucket, keys_per_group=5)
    with pytest.raises(ActiveSetUnavailable):
        run(PrunerAws(client, StandInSsm({}), bucket), settings(timedelta(0), timedelta(0)), lambda: LATER, print)
    report = _report(client, bucket)
    assert report is not None and report.outcome == "active-set-unavailable" and not report.ok


class FailingListing(PrunerAws):
    def listing(self, prefix: str):
        raise ConnectionError("the S3 endpoint went away")


def test_a_run_that_fails_midway_reports_the_failure_and_still_raises(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, _ = _small_world(client, bucket, keys_per_group=5)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    with pytest.raises(ConnectionError):
        run(FailingListing(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)), lambda: LATER, print)
    report = _report(client, bucket)
    assert report is not None and report.outcome == "failed"


def test_a_busy_run_reports_nothing_over_the_run_that_holds_the_lock(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    aws = PrunerAws(client, StandInSsm({}), bucket)
    assert aws.take_lock("other-run", LATER, LATER + timedelta(minutes=20))
    run(aws, settings(timedelta(days=14), timedelta(days=1)), lambda: LATER, lambda r: None, run_id="mine")
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix=PRUNER_REPORT_KEY)


class UnwritableReport(PrunerAws):
    def put_report(self, document: dict) -> None:
        raise PermissionError("AccessDenied")


def test_a_report_that_cannot_be_written_is_logged_and_never_hides_the_runs_outcome(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket, keys_per_group=5)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    emitted: list[dict] = []
    later = datetime.now(UTC) + timedelta(days=30)  # the stale keys' retention has passed
    summary = run(
        UnwritableReport(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)), lambda: later,
        emitted.append,
    )  # fmt: skip
    assert summary.deleted_keys == len(stale)
    (unwritten,) = [e for e in emitted if e["event"] == "report-unwritten"]
    assert unwritten["outcome"] == "pruned" and "AccessDenied" in unwritten["reason"]
