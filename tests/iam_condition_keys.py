"""Which condition keys each IAM action we condition supports, after the Service Authorization Reference
(docs.aws.amazon.com/service-authorization/latest/reference: "Actions, resources, and condition keys for"
Amazon EC2, IAM, Amazon S3, AWS STS, Amazon SQS, Amazon SNS, AWS Systems Manager; read 2026-11). A condition on
a key the action does not carry is evaluated as false (IAM user guide, "Condition keys that are not present in
the request"), so an Allow with it never applies: that is how the pruner's multipart listing was always denied.

Global keys (aws:SecureTransport, aws:PrincipalArn, ...) apply to every action; tag keys and service keys do
not. An action missing here fails the check: add it from the reference, do not guess."""

from __future__ import annotations

import fnmatch

GLOBAL_KEYS = {
    "aws:SecureTransport",
    "aws:PrincipalArn",
    "aws:PrincipalAccount",
    "aws:PrincipalTag/*",
    "aws:SourceArn",
    "aws:SourceAccount",
    "aws:RequestedRegion",
    "aws:SourceVpce",
    "aws:SourceVpc",
    "aws:CalledVia",
}
TAGS = {"aws:RequestTag/*", "aws:TagKeys"}
RESOURCE_TAGS = {"aws:ResourceTag/*"}

ACTION_KEYS: dict[str, set[str]] = {
    # Amazon EC2
    "ec2:CreateFleet": TAGS | RESOURCE_TAGS,
    "ec2:RunInstances": TAGS | RESOURCE_TAGS,
    "ec2:CreateLaunchTemplate": TAGS,
    "ec2:CreateNetworkInterface": TAGS | RESOURCE_TAGS,
    "ec2:CreateVolume": TAGS,
    "ec2:CreateSnapshot": TAGS | RESOURCE_TAGS,
    "ec2:CreateTags": TAGS | RESOURCE_TAGS | {"ec2:CreateAction"},
    "ec2:DeleteTags": TAGS | RESOURCE_TAGS,
    "ec2:DeleteLaunchTemplate": RESOURCE_TAGS,
    "ec2:TerminateInstances": RESOURCE_TAGS,
    "ec2:StopInstances": RESOURCE_TAGS,
    "ec2:DeleteSnapshot": RESOURCE_TAGS,
    # IAM (instance-profile resources carry aws:ResourceTag)
    "iam:CreateInstanceProfile": TAGS,
    "iam:TagInstanceProfile": TAGS | RESOURCE_TAGS,
    "iam:AddRoleToInstanceProfile": RESOURCE_TAGS,
    "iam:RemoveRoleFromInstanceProfile": RESOURCE_TAGS,
    "iam:DeleteInstanceProfile": RESOURCE_TAGS,
    "iam:PassRole": {"iam:PassedToService", "iam:AssociatedResourceArn"},
    # Amazon S3
    "s3:ListBucket": {"s3:prefix", "s3:delimiter", "s3:max-keys", "s3:TlsVersion"},
    "s3:ListBucketMultipartUploads": {"s3:TlsVersion"},  # no s3:prefix
    "s3:PutObject": {"s3:if-none-match", "s3:if-match", "s3:ObjectCreationOperation", "s3:TlsVersion"},
    "s3:DeleteObject": {"s3:TlsVersion"},
    "s3:*": {"s3:TlsVersion"},
    # AWS Systems Manager: SendCommand on an EC2 instance carries aws:ResourceTag and ssm:resourceTag (the Run
    # Command guide's tag-restriction example uses the latter; aws:* keys there also need aws:ViaAWSService).
    "ssm:SendCommand": RESOURCE_TAGS | {"ssm:resourceTag/*"},
    # Amazon SNS (only global keys on Publish)
    "sns:Publish": set(),
    # AWS STS (Pod Identity tags the session it assumes)
    "sts:AssumeRole": TAGS,
    "sts:TagSession": TAGS,
    # An OIDC provider's claims, named after its host (AWS STS: "<provider>:aud", ":sub", ":amr"; the IAM guide's
    # GitHub example conditions token.actions.githubusercontent.com:aud and :sub).
    "sts:AssumeRoleWithWebIdentity": {
        "token.actions.githubusercontent.com:aud",
        "token.actions.githubusercontent.com:sub",
        "token.actions.githubusercontent.com:amr",
    },
}


def unsupported_keys(statement: dict) -> list[str]:
    """'action: key' for every condition key of the statement that one of its actions does not carry."""
    actions = statement.get("Action", [])
    actions = [actions] if isinstance(actions, str) else actions
    keys = [key for operator in statement.get("Condition", {}).values() for key in operator]
    found = []
    for action in actions:
        allowed = ACTION_KEYS.get(action)
        for key in keys:
            if any(fnmatch.fnmatchcase(key, pattern) for pattern in GLOBAL_KEYS):
                continue
            if allowed is None or not any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed):
                found.append(f"{action}: {key}")
    return found
