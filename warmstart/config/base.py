"""What every section of the config model shares: the strict base model, units, name patterns, and the AWS tag
rules."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
)

from warmstart.checks.fix import UNSET, setting
from warmstart.problem import Refused

GIB = 2**30
MIB = 2**20

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Kubernetes' label syntax (apimachinery IsQualifiedName, IsValidLabelValue): an optional DNS-subdomain prefix and
# a name of 1-63 characters; values of 0-63.
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{LABEL_NAME}$"
LABEL_VALUE = rf"^({LABEL_NAME})?$"
DURATION = r"^([0-9]+(s|m|h))+$"
S3_BUCKET_NAME = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# Kubernetes versions the pinned kubectl layer (v35) can drive: kubectl supports one minor version of skew.
SUPPORTED_KUBERNETES_VERSIONS = ("1.34", "1.35", "1.36")


def unique_in_order(items: list) -> list:
    """The list with each item's later repeats left out."""
    return list(dict.fromkeys(items))


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


EXAMPLE_CIDR = "10.20.0.0/16"


def ipv4_cidr(value: str, replacement: object = UNSET) -> ipaddress.IPv4Network:
    """An IPv4 block written as its network address (the VPC and EKS public endpoint take IPv4 here). A block
    that is not one is refused with `replacement` as its fix's value (by default: removed, so that the setting's
    default applies or the list item goes)."""
    instead = setting("", replacement)
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise Refused("is not a CIDR block", f"write an IPv4 block such as {EXAMPLE_CIDR}", instead) from None
    if network.version != 4:
        raise Refused(
            "is an IPv6 block", f"write an IPv4 block such as {EXAMPLE_CIDR} (IPv6 is not supported)", instead
        )
    if str(network) != value:
        raise Refused("has host bits set", f"write the block's network address, {network}", setting("", str(network)))
    return network


def _cidr_block(value: str) -> str:
    ipv4_cidr(value)
    return value


def _required_cidr_block(value: str) -> str:
    ipv4_cidr(value, replacement=EXAMPLE_CIDR)
    return value


def _role_arn(value: str) -> str:
    if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", value):
        raise Refused(
            "is not an IAM role ARN", "write arn:aws:iam::<account>:role/<name>, or remove it", setting("", UNSET)
        )
    return value


CidrBlock = Annotated[str, AfterValidator(_cidr_block)]
RequiredCidrBlock = Annotated[str, AfterValidator(_required_cidr_block)]
RoleArn = Annotated[str, AfterValidator(_role_arn)]


# AWS resource tags (Tagging AWS resources, "Tag naming limits and requirements"): keys of 1-128 and values of
# 0-256 Unicode letters, digits, spaces and _ . : / = + - @; the aws: prefix is reserved for AWS.
TAG_CHARACTERS = r"^[\w .:/=+\-@]*$"


def _not_aws_reserved(value: str) -> str:
    if value.lower().startswith("aws:"):
        raise Refused(
            "starts with 'aws:', which AWS reserves", "choose another key, or remove the tag", setting("", UNSET)
        )
    return value


TagKey = Annotated[str, Field(min_length=1, max_length=128, pattern=TAG_CHARACTERS), AfterValidator(_not_aws_reserved)]
TagValue = Annotated[str, Field(max_length=256, pattern=TAG_CHARACTERS)]
