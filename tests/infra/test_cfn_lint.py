"""cfn-lint on every synthesized template.

Ignored, and only these: W3005 (CDK emits a DependsOn that a GetAtt already implies; harmless and not ours)
and W3010 (the AZs are fixed in config on purpose: synth must never look them up).
"""

from pathlib import Path

from cfnlint.api import ManualArgs, lint_file

from stacks.network_stack import owns_network_resources

IGNORED = ["W3005", "W3010"]


def test_every_template_lints_clean(every_env):
    paths = every_env.template_paths()
    ci = 1 if every_env.config.deploy.github else 0
    # An existing VPC has a network stack only for the S3 gateway endpoint warmstart adds to it.
    network = 1 if owns_network_resources(every_env.config.network) else 0
    assert len(paths) == network + 3 + len(every_env.config.models) + ci  # data, cluster, pruner, models, ci
    for path in paths:
        matches = lint_file(Path(path), config=ManualArgs(regions=[every_env.config.region], ignore_checks=IGNORED))
        assert [str(m) for m in matches] == [], path.name
