"""How a construct accepts a cdk-nag (or cfn-lint) finding on what it creates: the exact finding, with its reason.

Each construct acknowledges its own findings, on the narrowest child that produces them, so a new finding
anywhere else still fails synth. Logical IDs in finding IDs are read from the constructs, never written out.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reason: str, *finding_ids: str) -> None:
    for finding_id in finding_ids:
        # "<plugin>::<rule>": an ID without the plugin prefix would be taken for an annotation rule.
        plugin_id = finding_id if "::" in finding_id.split("[", 1)[0] else f"AwsSolutions::{finding_id}"
        Validations.of(scope).acknowledge(Acknowledgment(id=plugin_id, reason=reason))


def managed(policy: str) -> str:
    """The finding of an AWS-managed policy on a role."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


def wildcard(resource: str) -> str:
    """The finding of a wildcard resource in a policy."""
    return f"AwsSolutions-IAM5[Resource::{resource}]"


def logical_id(construct: IConstruct) -> str:
    """The logical ID cdk-nag shows in a finding (as in the synthesized template) of a construct's resource."""
    resource = construct.node.default_child or construct
    return Stack.of(construct).resolve(resource.logical_id)  # type: ignore[attr-defined]


def arn_wildcard(construct: IConstruct) -> str:
    """The finding of `<resource ARN>:*` (a function and its versions) for a construct's resource."""
    return wildcard(f"<{logical_id(construct)}.Arn>:*")
