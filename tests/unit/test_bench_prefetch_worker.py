"""The prefetch benchmark starts its agent process as the agent image starts it: bytecode compiled ahead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.weights_prefetch import ROOT, compiled_worker_env


def test_the_worker_starts_from_bytecode_its_warm_up_compiled_as_the_image_has_it(tmp_path, monkeypatch):
    """Where PYTHONDONTWRITEBYTECODE is set the worker would compile the agent's modules at every start, which the
    image never does (it compiles them when it is built); the warm-up writes them in the run's own folder, and the
    timed start reads them there without writing any."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = compiled_worker_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    worker = [sys.executable, str(ROOT / "bench" / "weights_worker.py"), "--imports-only"]
    in_repository = _bytecode_beside(ROOT / "node_agent")

    subprocess.run(worker, env=env, check=True)
    compiled = tmp_path / "bytecode" / str(ROOT).lstrip("/") / "node_agent" / "runtime" / "s3"
    weights_download_bytecode = next(compiled.glob("weights_download.*.pyc"))
    written = _bytecode_beside(tmp_path / "bytecode")
    assert len(written) > 100  # the packages it imports too (botocore, urllib3, awscrt)

    subprocess.run(worker, env=env, check=True)
    assert _bytecode_beside(tmp_path / "bytecode") == written
    assert weights_download_bytecode.exists()
    assert _bytecode_beside(ROOT / "node_agent") == in_repository  # the repository left alone


def _bytecode_beside(folder: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in folder.rglob("*.pyc")}
