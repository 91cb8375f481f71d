"""warmstart command line:
python -m warmstart_cli plan --env dev                  each model's derived settings (the synth-time checks included)
python -m warmstart_cli plan --env prod --estimate      each model's pod start, phase by phase, in three cases
    [--nodes N] [--plot FILE.png]                   N new nodes scaling out at once; a stacked-bar chart
python -m warmstart_cli status --env prod               cache state per model, read through your kubeconfig (kubectl)
python -m warmstart_cli status --env prod --starts      the last pod starts per model, phase by phase
python -m warmstart_cli preflight --env prod --for deploy --assembly cdk.out/prod
                                                    the checks `make deploy` (bootstrap, diff, destroy) runs first
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

from contracts.start_record import STARTS_PATH
from warmstart.catalog import default_catalog
from warmstart.checks.fix import fix_record
from warmstart.config_file import ConfigError
from warmstart.estimate import estimate_environment
from warmstart.estimate_report import render_estimates
from warmstart.loader import load_config
from warmstart.plan import render_plan
from warmstart.problem import Problem
from warmstart_cli.calibrate import RecordsError, calibrate, calibrated_config, read_records, render_calibration
from warmstart_cli.cluster_access import diagnose, kubectl_missing
from warmstart_cli.preflight import ACTIONS, bootstrap_options, check, run_command, target
from warmstart_cli.status import (
    DAEMON_SETS_PATH,
    HPAS_PATH,
    NODES_PATH,
    model_status,
    read_starts,
    render_starts,
    render_status,
)

COMMANDS = ("plan", "status", "preflight")


class ClusterUnreadable(Exception):
    """kubectl could not read the cluster; the message says what is missing and how to fix it."""


def kubectl_get(kubectl: list[str], path: str, config) -> dict:
    """Reads an API path with the user's kubeconfig and credentials (kubectl does the auth)."""
    try:
        done = subprocess.run([*kubectl, "get", "--raw", path], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ClusterUnreadable(str(kubectl_missing(config, kubectl[0]))) from None
    except subprocess.TimeoutExpired:
        raise ClusterUnreadable(str(diagnose("kubectl did not answer within 60 s", config))) from None
    if done.returncode != 0:
        if "(NotFound)" in done.stderr:
            return {"items": []}  # nothing of that kind deployed yet
        raise ClusterUnreadable(str(diagnose(done.stderr, config)))
    return json.loads(done.stdout)


def plan_command(config, args: argparse.Namespace, source: str) -> int:
    if not args.estimate:
        if args.plot or args.nodes or args.calibrate:
            print("warmstart plan: --nodes, --plot and --calibrate go with --estimate", file=sys.stderr)
            return 2
        print(render_plan(config, default_catalog(), source))
        return 0
    if args.nodes is not None and args.nodes < 1:
        print("warmstart plan: --nodes must be at least 1", file=sys.stderr)
        return 2
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(
            "warmstart plan: --plot draws with matplotlib, which make synth does not install: "
            ".venv/bin/pip install -r requirements-runtime.txt (or matplotlib==3.11.2 alone)",
            file=sys.stderr,
        )
        return 2
    catalog = default_catalog()
    if args.calibrate:
        try:
            timelines = read_records(args.calibrate)
        except RecordsError as error:
            print(f"warmstart plan: {error}", file=sys.stderr)
            return 2
        calibration = calibrate(config, catalog, timelines)
        print(render_calibration(config, catalog, calibration, timelines))
        print()
        config = calibrated_config(config, calibration)
    estimates = estimate_environment(config, catalog, nodes=args.nodes)
    print(f"environment {config.name} ({source}): estimated pod start, seconds per phase")
    print(render_estimates(estimates, config, catalog))
    if args.plot:
        from warmstart_cli.estimate_plot import plot_estimates

        written = plot_estimates(estimates, args.plot, config.name)
        print(f"chart written to {written}")
    return 0


def preflight_command(config, args: argparse.Namespace) -> int:
    if args.target:
        print(target(config))
        return 0
    if args.bootstrap_options:
        print(" ".join(bootstrap_options(config)))
        return 0
    if args.action is None:
        print("warmstart preflight: say --for one of " + ", ".join(ACTIONS), file=sys.stderr)
        return 2
    if args.action in ("diff", "deploy", "destroy") and not (args.assembly and args.assembly.is_dir()):
        print(f"warmstart preflight: no cloud assembly at {args.assembly}; run make synth first", file=sys.stderr)
        return 2
    problems, notes = check(args.action, config, run=run_command, assembly=args.assembly, confirm=args.confirm)
    for note in notes:
        print(note)
    if problems:
        print(f"warmstart {args.action} {config.name}: stopped before touching the account", file=sys.stderr)
        for problem in problems:
            print(f"- {problem}", file=sys.stderr)
        return 2
    print(f"warmstart {args.action} {config.name}: {target(config)}, checks passed")
    return 0


def problem_record(problem: Problem) -> dict:
    """A refusal as JSON: where, what, the fix in words, and each alternative fix as data."""
    return {
        "field": problem.field,
        "message": problem.message,
        "fix": problem.fix,
        "fixes": [fix_record(fix) for fix in problem.fixes],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="warmstart")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(COMMANDS[0], help="print each model's derived settings and run the synth-time checks")
    status = commands.add_parser(COMMANDS[1], help="cache state per model: READY/TARGET GPU nodes")
    status.add_argument("--kubectl", default="kubectl", help="kubectl command (e.g. 'kubectl --context prod')")
    status.add_argument("--starts", action="store_true", help="the last pod starts per model, phase by phase")
    status.add_argument("--last", type=int, default=5, help="with --starts: starts shown per model (default 5)")
    status.add_argument("--json", action="store_true", help="with --starts: every start record as JSON")
    plan.add_argument("--estimate", action="store_true", help="predict each phase of a pod start in three cases")
    plan.add_argument("--nodes", type=int, help="new nodes scaling out at once (share the NAT; default: config)")
    plan.add_argument("--plot", type=Path, help="with --estimate: write a stacked-bar chart (PNG) here")
    plan.add_argument(
        "--calibrate",
        type=Path,
        help="with --estimate: fit the estimate to a cluster's start records (status --starts --json, or the "
        "agents' ConfigMaps as kubectl get -o json) and show it beside them",
    )
    plan.add_argument(
        "--problems-json",
        action="store_true",
        help="on a refused config, also print each problem and its fixes as JSON on stdout (for tools)",
    )
    preflight = commands.add_parser(COMMANDS[2], help="the checks the make deploy targets run first")
    preflight.add_argument("--for", dest="action", choices=ACTIONS, help="the make target about to run")
    preflight.add_argument("--assembly", type=Path, help="the synthesized cloud assembly (cdk.out/<env>)")
    preflight.add_argument("--confirm", default="", help="destroy: the environment's name, typed back")
    preflight.add_argument("--target", action="store_true", help="print aws://<account>/<region> and stop")
    preflight.add_argument(
        "--bootstrap-options", action="store_true", help="print cdk bootstrap's options for the config and stop"
    )
    for command in (plan, status, preflight):
        source = command.add_mutually_exclusive_group(required=True)
        source.add_argument("--env", help="an environment in config/<env>.yaml")
        source.add_argument("--config", type=Path, help="any environment file")
    args = parser.parse_args(argv)
    path = args.config or Path("config") / f"{args.env}.yaml"
    try:
        config = load_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        if getattr(args, "problems_json", False):
            print(json.dumps([problem_record(p) for p in error.problems], indent=2, default=str))
        return 2
    if args.command == "plan":
        return plan_command(config, args, str(path))
    if args.command == "preflight":
        return preflight_command(config, args)
    kubectl = shlex.split(args.kubectl)
    if args.starts:
        try:
            starts = read_starts(kubectl_get(kubectl, STARTS_PATH, config))
        except ClusterUnreadable as error:
            print(f"warmstart status: cannot read cluster {config.cluster.name}: {error}", file=sys.stderr)
            return 3
        if args.json:
            print(json.dumps([t.to_dict() for t in starts], indent=2))
            return 0
        print(render_starts(config, starts, last=max(1, args.last)))
        return 0
    try:
        nodes, daemon_sets = kubectl_get(kubectl, NODES_PATH, config), kubectl_get(kubectl, DAEMON_SETS_PATH, config)
        autoscaled = any(model.autoscaling for model in config.models)
        hpas = kubectl_get(kubectl, HPAS_PATH, config) if autoscaled else {}
    except ClusterUnreadable as error:
        print(f"warmstart status: cannot read cluster {config.cluster.name}: {error}", file=sys.stderr)
        return 3
    print(render_status(config, model_status(config, default_catalog(), nodes, daemon_sets, hpas)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
