"""Node-written text on the operator's terminal: `warmstart status --starts` prints what node agents published (any
node can write its starts ConfigMap). The P2 of issue 45: an ANSI escape in a record cleared the terminal and printed
a line of its own. Every character that is not printable is now shown escaped."""

from __future__ import annotations

import copy
import json

from tests.synth import ROOT
from warmstart.loader import load_config
from warmstart_cli.status import read_starts, render_starts

FIXTURES = ROOT / "tests" / "fixtures" / "status"
# Clear the screen, home the cursor, print a fake line; a bidi override; a line separator; a C1 control.
HOSTILE = "\x1b[2J\x1b[Hvllm-ok\r\nmodel fake  ready\u202egnp.\u2028\x9b31m"


def _starts_with(**changes: str) -> dict:
    config_maps = json.loads((FIXTURES / "prod-starts.json").read_text())
    hostile = copy.deepcopy(config_maps)
    records = json.loads(hostile["items"][0]["data"]["starts.json"])
    records[0].update(changes)
    hostile["items"][0]["data"]["starts.json"] = json.dumps(records)
    return hostile


def test_a_record_cannot_write_to_the_operators_terminal():
    config = load_config(ROOT / "config" / "prod.yaml")
    clean = render_starts(config, read_starts(json.loads((FIXTURES / "prod-starts.json").read_text())))
    out = render_starts(config, read_starts(_starts_with(pod=HOSTILE[:63], outcome=HOSTILE, image=HOSTILE)))
    assert all(c.isprintable() for line in out.split("\n") for c in line)
    assert len(out.split("\n")) == len(clean.split("\n"))  # no line of its own
    assert "\\x1b[2J\\x1b[Hvllm-ok\\x0d\\x0amodel fake" in out and "\\u202e" in out and "\\x9b31m" in out


def test_vllms_load_failure_reason_reaches_the_terminal_escaped_and_bounded():
    """The reason comes from the pod's own log (any text a workload prints): cut to MAX_REASON_CHARS by the agent's
    parser, and escaped on the terminal."""
    from node_agent.runtime.vllm_log import MAX_REASON_CHARS, parse_start

    line = "Compiling model again due to a load failure from /x/model, reason: " + HOSTILE + "y" * 5000
    reason = parse_start([(0.0, line)]).load_failure
    assert reason is not None and len(reason) <= MAX_REASON_CHARS
    config = load_config(ROOT / "config" / "prod.yaml")
    clean = render_starts(config, read_starts(json.loads((FIXTURES / "prod-starts.json").read_text())))
    out = render_starts(config, read_starts(_starts_with(compile_cache="miss", compile_load_failure=reason)))
    assert all(c.isprintable() for line in out.split("\n") for c in line)
    assert len(out.split("\n")) == len(clean.split("\n"))
    assert "load failure: \\x1b[2J" in out
