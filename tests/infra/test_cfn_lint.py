"""cfn-lint on every synthesized template.

Ignored, and only these: W3005 (CDK emits a DependsOn that a GetAtt already implies; harmless and not ours)
and W3010 (the AZs are fixed in config on purpose: synth must never look them up).
"""

from pathlib import Path

from cfnlint.api import ManualArgs, lint_file

IGNORED = ["W3005", "W3010"]


def test_every_template_lints_clean(every_env):
    paths = every_env.template_paths()
    ci = 1 if every_env.config.deploy.github else 0
    assert len(paths) == 4 + len(every_env.config.models) + ci  # network, data, cluster, pruner, models, ci
    for path in paths:
        matches = lint_file(Path(path), config=ManualArgs(regions=[every_env.config.region], ignore_checks=IGNORED))
        assert [str(m) for m in matches] == [], path.name
