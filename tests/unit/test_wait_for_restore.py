"""The init step that holds an inference pod until the node agent's restore, within a bound."""

import os
import subprocess
import time

from model_workload.pod_spec import WAIT_FOR_RESTORE


def _run(marker, wait_seconds: int) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        ["/bin/sh", "-c", WAIT_FOR_RESTORE],
        env={"PATH": os.environ["PATH"], "MARKER": str(marker), "WAIT_SECONDS": str(wait_seconds)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return result, time.monotonic() - started


def test_returns_at_once_when_the_agent_is_done(tmp_path):
    marker = tmp_path / "done"
    marker.write_text('{"status": "restored"}')
    result, seconds = _run(marker, 60)
    assert result.returncode == 0 and "restored" in result.stdout
    assert seconds < 5


def test_gives_up_after_the_bound_and_still_lets_the_pod_start(tmp_path):
    result, seconds = _run(tmp_path / "never", 2)
    assert result.returncode == 0
    assert "no compile-cache restore after 2s" in result.stdout
    assert 1.5 <= seconds < 10


def test_no_wait_bound_means_no_wait(tmp_path):
    result, seconds = _run(tmp_path / "never", 0)
    assert result.returncode == 0 and seconds < 5
