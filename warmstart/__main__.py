"""warmstart command line:
python -m warmstart plan --env dev        each model's derived settings (the synth-time checks included)
python -m warmstart status --env prod     cache state per model, read through your kubeconfig (kubectl)
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from warmstart.catalog import default_catalog
from warmstart.loader import ConfigError, load_config
from warmstart.plan import render_plan
from warmstart.status import DAEMON_SETS_PATH, NODES_PATH, model_status, render_status


def kubectl_get(kubectl: list[str], path: str) -> dict:
    """Reads an API path with the user's kubeconfig and credentials (kubectl does the auth)."""
    done = subprocess.run([*kubectl, "get", "--raw", path], capture_output=True, text=True)
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return {"items": []}
        raise RuntimeError(f"kubectl get --raw {path} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="warmstart")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="print each model's derived settings and run the synth-time checks")
    status = commands.add_parser("status", help="cache state per model: READY/TARGET GPU nodes")
    status.add_argument("--kubectl", default="kubectl", help="kubectl command (e.g. 'kubectl --context prod')")
    for command in (plan, status):
        source = command.add_mutually_exclusive_group(required=True)
        source.add_argument("--env", help="an environment in config/<env>.yaml")
        source.add_argument("--config", type=Path, help="any environment file")
    args = parser.parse_args(argv)
    path = args.config or Path("config") / f"{args.env}.yaml"
    try:
        config = load_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    if args.command == "plan":
        print(render_plan(config, default_catalog(), str(path)))
        return 0
    kubectl = shlex.split(args.kubectl)
    try:
        nodes, daemon_sets = kubectl_get(kubectl, NODES_PATH), kubectl_get(kubectl, DAEMON_SETS_PATH)
    except (RuntimeError, FileNotFoundError) as error:
        print(f"warmstart status: cannot read the cluster: {error}", file=sys.stderr)
        return 3
    print(render_status(config, model_status(config, default_catalog(), nodes, daemon_sets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
