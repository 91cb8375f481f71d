"""Name rules of other systems, in full, so that a name they would refuse is refused at synth with its reason:
S3 bucket names and container image references that must name a fixed release."""

from __future__ import annotations

import ipaddress
import re

# S3 user guide, "General purpose bucket naming rules" (read 2026-11), plus the rule aws-cdk-lib's Bucket
# validation adds (no '-' next to '.', aws-cdk-lib 2.275 aws-s3 bucket.js validateBucketName).
BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problems(name: str) -> list[str]:
    """Every rule the name breaks, in words (empty when S3 and CDK accept it)."""
    problems = []
    if not 3 <= len(name) <= 63:
        problems.append(f"is {len(name)} characters long (3 to 63 allowed)")
    if re.search(r"[^a-z0-9.-]", name):
        problems.append("may hold only lowercase letters, digits, '.' and '-'")
    if name and not (name[0].isalnum() and name[-1].isalnum()):
        problems.append("must start and end with a lowercase letter or digit")
    if ".." in name:
        problems.append("must not have two '.' in a row")
    if ".-" in name or "-." in name:
        problems.append("must not have '-' next to '.'")
    try:
        ipaddress.IPv4Address(name)
        problems.append("must not be formatted as an IP address")
    except ValueError:
        pass
    problems += [f"must not start with '{p}' (reserved)" for p in BUCKET_PREFIXES if name.startswith(p)]
    problems += [f"must not end with '{s}' (reserved)" for s in BUCKET_SUFFIXES if name.endswith(s)]
    return problems


# Tags that name a moving target: whatever the registry points them at today.
MOVING_TAGS = frozenset(
    {
        "latest",
        "nightly",
        "main",
        "master",
        "dev",
        "develop",
        "devel",
        "edge",
        "stable",
        "head",
        "canary",
        "unstable",
        "rolling",
        "current",
        "next",
        "preview",
        "testing",
        "experimental",
        "snapshot",
        "beta",
        "alpha",
    }
)
DATE = re.compile(r"(?<!\d)(\d{8}|\d{4}-\d{2}-\d{2})(?!\d)")
# A version: dotted numbers anywhere not glued to a word (0.21.0, v0.21.0, 2.11.0-cuda12.8), or a whole tag that
# is a number with an optional v (v1, 16).
VERSION = re.compile(r"(?<![a-z])v?\d+(\.\d+)+|^v?\d+$", re.IGNORECASE)
COMMIT = re.compile(r"^(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}$")


# distribution/reference grammar (what Kubernetes and containerd accept): an optional registry host (a first
# component with a '.' or ':', or 'localhost'), lowercase path components joined by '.', '_', '__' or '-', an
# optional tag of up to 128 word characters, '.' and '-', and an optional digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?\.)*[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?::[0-9]+)?$"
)
_NAME = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@(?P<digest>[^@]+))?$")


def reference_problem(image: str) -> str | None:
    """Why Kubernetes would refuse the reference (InvalidImageName), or None."""
    first, _, rest = image.partition("/")
    host_given = bool(rest) and ("." in first or ":" in first or first == "localhost")
    if host_given and not _HOST.match(first):
        return f"has a malformed registry host {first!r}"
    match = _NAME.match(rest if host_given else image)
    if match is None:
        return "is not a valid image reference (lowercase repository, no spaces, tag after ':', digest after '@')"
    digest = match.group("digest")
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        return "has a malformed digest (sha256: and 64 hex digits)"
    return None


def image_tag(image: str) -> str | None:
    """The tag of a reference (None without one); a registry port is not a tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def moving_reference(image: str) -> str | None:
    """Why the reference may point at different images over time, or None when it names a fixed release."""
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return None
    tag = image_tag(image)
    if tag is None:
        return "has no tag (it means :latest)"
    tokens = re.split(r"[-._]", tag.lower())
    fixed = DATE.search(tag) is not None or any(COMMIT.match(t) for t in tokens)
    moving = sorted(set(tokens) & MOVING_TAGS)
    if moving and not fixed:
        return f"has the moving tag '{tag}'" + (f" ({', '.join(moving)})" if moving != [tag.lower()] else "")
    if not (fixed or VERSION.search(tag)):
        return f"has the tag '{tag}', which names no version (such as 0.21.0, v0.21.0 or v1)"
    return None
