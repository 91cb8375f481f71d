"""Kubernetes resource quantities as the API server writes them (k8s.io/apimachinery pkg/api/resource Quantity:
a signed decimal number, then a binary suffix Ki-Ei, a decimal suffix n-E, or a decimal exponent e/E<int>), read
from what a cluster returns: anything else is None, never a guess."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

MAX_LENGTH = 64
MAX_EXPONENT = 30  # beyond any request a node could hold (10^30)
QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
SCALE = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(text: Any) -> Decimal | None:
    """'100m' -> 0.1, '129e6' -> 129000000, '1Gi' -> 1073741824; None for what is no quantity."""
    if not isinstance(text, str) or len(text) > MAX_LENGTH:
        return None
    found = QUANTITY.match(text)
    if found is None:
        return None
    exponent = found.group("exponent")
    if exponent is not None and abs(int(exponent)) > MAX_EXPONENT:
        return None
    try:
        value = Decimal(found.group("number"))
    except InvalidOperation:
        return None
    if found.group("suffix"):
        value *= SCALE[found.group("suffix")]
    elif exponent is not None:
        value = value.scaleb(int(exponent))
    return -value if found.group("sign") == "-" else value
