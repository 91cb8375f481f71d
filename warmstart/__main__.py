"""warmstart command line: `python -m warmstart plan --env dev` (or `--config path.yaml`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warmstart.catalog import default_catalog
from warmstart.loader import ConfigError, load_config
from warmstart.plan import render_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="warmstart")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="print each model's derived settings and run the synth-time checks")
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--env", help="an environment in config/<env>.yaml")
    source.add_argument("--config", type=Path, help="any environment file")
    args = parser.parse_args(argv)
    path = args.config or Path("config") / f"{args.env}.yaml"
    try:
        config = load_config(path)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    print(render_plan(config, default_catalog(), str(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
