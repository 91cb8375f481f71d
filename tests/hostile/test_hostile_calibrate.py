"""`warmstart plan --estimate --calibrate` reads start records every node wrote (through the starts ConfigMaps):
issue 45 found a traceback on valid records whose compile median rounds to 0.0, and no size cap (300 MB: 106 s and
1.9 GB). It answers every shape with a result or a one-line refusal (exit 2), and never reads past its cap."""

from __future__ import annotations

import json
import time

from tests.builders import start_record
from tests.synth import ROOT
from warmstart.loader import load_config
from warmstart_cli.__main__ import main


def _calibrate(path) -> int:
    return main(["plan", "--env", "dev", "--estimate", "--calibrate", str(path)])


def test_a_compile_median_that_rounds_to_zero_is_no_measurement(tmp_path, capsys):
    model = load_config(ROOT / "config" / "dev.yaml").models[0].name
    phases = {"image": 1.0, "engine": 40.0}
    records = [
        start_record(model, new_node=False, compile_cache=cache, phases={**phases, "compile": seconds})
        for cache, seconds in (("miss", 0.04), ("hit", 0.04), ("miss", 0.03), ("hit", 0.0))
    ]
    path = tmp_path / "records.json"
    path.write_text(json.dumps(records))
    assert _calibrate(path) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_file_past_the_cap_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.write(b"[" + b" " * 16)
        handle.truncate(256 * 2**20)  # sparse: 256 MiB of nothing a node could have written
    started = time.monotonic()
    assert _calibrate(path) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert "larger than 64 MiB" in err and "Traceback" not in err
    split = tmp_path / "split.json"  # the cut falls inside a two-byte character: still the size's refusal
    split.write_bytes(b"[ " + "\u00e9".encode() * (33 * 2**20))
    assert _calibrate(split) == 2
    assert "larger than 64 MiB" in capsys.readouterr().err


def test_records_nested_past_the_parsers_depth_are_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert _calibrate(path) == 2
    err = capsys.readouterr().err
    assert "too deep" in err and "Traceback" not in err
