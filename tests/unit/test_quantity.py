"""Kubernetes quantities as a cluster's API returns them (k8s.io/apimachinery v0.35.4 pkg/api/resource), and what is
none: read from untrusted answers, never guessed."""

from __future__ import annotations

from decimal import Decimal

import pytest

from warmstart.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", "0.1"),
        ("1.5", "1.5"),
        ("128974848", "128974848"),
        ("129e6", "129000000"),
        ("1500e-3", "1.5"),
        ("1E3", "1000"),
        ("123Mi", str(123 * 2**20)),
        ("1Gi", str(2**30)),
        ("2Ei", str(2 * 2**60)),
        ("250000u", "0.25"),
        ("10n", "0.00000001"),
        ("1P", "1000000000000000"),
        (".5", "0.5"),
        ("5.", "5"),
        ("+2k", "2000"),
        ("-1", "-1"),
    ],
)
def test_every_form_the_api_server_writes(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    ["", "m", "1Pi0", "1 Gi", "1gi", "0x10", "1e", "1e99", "1.2.3", "Infinity", "NaN", "1" * 65, None, 5, ["1"], "１"],
)
def test_anything_else_is_none(text):
    assert parse_quantity(text) is None
