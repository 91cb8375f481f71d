"""The pruner's report as the agents read it: anything but a report of this version, with a plausible end and a
known outcome, is refused (written by the pruner's role, read as untrusted all the same)."""

from __future__ import annotations

import pytest

from contracts.pruner_report import PrunerReport, parse_report

GOOD = {"version": 1, "finished_at": 1796600000.5, "outcome": "pruned"}


def test_a_report_round_trips():
    report = PrunerReport(1796600000.5, "failed")
    assert parse_report(report.to_dict()) == report and not report.ok
    assert parse_report(GOOD) == PrunerReport(1796600000.5, "pruned")


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        "pruned",
        {},
        {**GOOD, "version": 2},
        {**GOOD, "version": "1"},
        {**GOOD, "finished_at": "1796600000"},
        {**GOOD, "finished_at": True},
        {**GOOD, "finished_at": float("nan")},
        {**GOOD, "finished_at": float("inf")},
        {**GOOD, "finished_at": -5},
        {**GOOD, "finished_at": 1e12},  # milliseconds, or the far future
        {**GOOD, "outcome": "ok"},
        {**GOOD, "outcome": None},
        {**GOOD, "outcome": ["pruned"]},
    ],
)
def test_anything_else_is_refused(document):
    assert parse_report(document) is None
