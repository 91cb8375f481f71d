"""Why kubectl could not read the cluster, in words, with the command that fixes it (`warmstart status`).

kubectl's own errors are written for people who know kubeconfig and the AWS CLI's exec plugin; a platform engineer
running `warmstart status` for the first time wants to know what is missing. Each known failure is recognised by
the text kubectl (v1.35) or the AWS CLI v2 prints for it; anything else is passed on, first line only, with the
request's selector decoded.
"""

from __future__ import annotations

import re
import shlex
import urllib.parse

from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem as AccessProblem  # what is missing, and its fix


def update_kubeconfig(config: EnvironmentConfig) -> str:
    """The AWS CLI command that points kubectl at the environment's cluster (with the first admin role, if any)."""
    command = ["aws", "eks", "update-kubeconfig", "--name", config.cluster.name, "--region", config.region]
    if config.cluster.admin_role_arns:
        command += ["--role-arn", config.cluster.admin_role_arns[0]]
    return shlex.join(command)


# (pattern in kubectl's stderr, what is missing, how to fix it: {kubeconfig} is the update-kubeconfig command), in
# order: the first that matches wins (an exec plugin's failure also says "Unable to connect to the server").
KNOWN = (
    (
        r"localhost:8080 was refused|no configuration has been provided|error loading config file|"
        r"current-context is not set|context was not found",
        "kubectl has no cluster to talk to (no kubeconfig, or no current context)",
        "point it at {cluster}: {kubeconfig}",
    ),
    (
        r"executable \S+ not found",
        "the kubeconfig gets its token from the AWS CLI (aws eks get-token), which is not installed here",
        "install the AWS CLI v2 (https://docs.aws.amazon.com/cli/), then: {kubeconfig}",
    ),
    (
        r"not authorized to perform: sts:AssumeRole|AccessDenied\).*AssumeRole",
        "these credentials may not assume the role the kubeconfig names (--role-arn)",
        "use credentials that may assume it, or write the kubeconfig for another role of {admins}: {kubeconfig}",
    ),
    (
        r"Token has expired|SSO session .*expired|security token included in the request is expired|ExpiredToken|"
        r"Unable to locate credentials|InvalidClientTokenId|Error when retrieving token from sso",
        "kubectl's AWS credentials are missing or expired (the kubeconfig's `aws eks get-token` failed)",
        "sign in again (aws sso login, or set AWS_PROFILE to a profile of account {account}), then: {kubeconfig}",
    ),
    (
        r"You must be logged in to the server|\(Unauthorized\)",
        # get-token signs locally: expired session keys still make a token, which the cluster then refuses.
        "the cluster refused these credentials: they have expired, or this IAM principal has no access entry",
        "check them with `aws sts get-caller-identity` (sign in again if it fails), and use a role with an access "
        "entry on {cluster} ({admins}): {kubeconfig}",
    ),
    (
        r"is forbidden|\(Forbidden\)",
        "these credentials may not read what status needs (nodes, DaemonSets, HPAs, ConfigMaps)",
        "use a role with cluster read access on {cluster}: {kubeconfig}",
    ),
    (
        r"x509: certificate",
        "kubectl could not verify the API endpoint's TLS certificate (this machine's clock, or a TLS-intercepting "
        "proxy on the way)",
        "check the clock, and that no proxy stands between here and {cluster}'s endpoint (NO_PROXY), then: "
        "{kubeconfig}",
    ),
    (
        r"no such host|i/o timeout|was refused - did you specify|connection refused|Unable to connect to the server|"
        r"dial tcp|TLS handshake timeout|did not answer within",
        "kubectl cannot reach the cluster's API endpoint (another cluster's kubeconfig, a deleted cluster, a "
        "private endpoint outside its VPC, or a credential prompt, such as an MFA code, waiting unseen)",
        "check that {cluster} exists in {region} and is reachable from here (cluster.endpoint_access), then: "
        "{kubeconfig}",
    ),
)


def diagnose(stderr: str, config: EnvironmentConfig) -> AccessProblem:
    fields = {
        "cluster": config.cluster.name,
        "region": config.region,
        "account": config.account,
        "kubeconfig": update_kubeconfig(config),
        # Who may read the cluster: the roles warmstart gave access, or, in a cluster it did not create, the
        # access its owners manage.
        "admins": "cluster.admin_role_arns"
        if config.cluster.owned
        else "an access entry the cluster's owners grant (aws eks create-access-entry)",
    }
    for pattern, what, fix in KNOWN:
        if re.search(pattern, stderr):
            return AccessProblem("", what, fix.format(**fields))
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no message")
    return AccessProblem(
        "",
        f"kubectl failed: {urllib.parse.unquote(first)[:300]}",
        f"check `kubectl get nodes` works for {config.cluster.name}; to point kubectl at it: {fields['kubeconfig']}",
    )


def kubectl_missing(config: EnvironmentConfig, kubectl: str) -> AccessProblem:
    return AccessProblem(
        "",
        f"{kubectl} is not installed (status reads the cluster through kubectl)",
        f"install kubectl {config.cluster.kubernetes_version} (https://kubernetes.io/docs/tasks/tools/), then: "
        f"{update_kubeconfig(config)}",
    )
