"""The habits that hold themselves: `make hooks` points git at .githooks/, whose commit-msg hook holds a subject to
72 characters and whose pre-commit hook runs the pull-request gate (`make pr`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.synth import ROOT

HOOKS = ROOT / ".githooks"


def _commit_msg(tmp_path: Path, message: str) -> subprocess.CompletedProcess:
    (tmp_path / "COMMIT_EDITMSG").write_text(message)
    return subprocess.run([str(HOOKS / "commit-msg"), str(tmp_path / "COMMIT_EDITMSG")], capture_output=True, text=True)


@pytest.mark.parametrize(
    ("message", "accepted"),
    [
        ("x" * 72 + "\n\nA body of any length " + "y" * 200, True),
        ("x" * 73, False),
        ("Issue 47: " + "a long subject that goes on " * 4, False),
        ("Merge branch 'main' of a remote whose name alone is longer than seventy-two characters", True),
        ("   \n\nbody only", False),
    ],
)
def test_the_commit_msg_hook_holds_the_subject_to_72_characters(tmp_path, message, accepted):
    done = _commit_msg(tmp_path, message)
    assert (done.returncode == 0) == accepted, done.stderr
    if not accepted:
        assert "commit-msg:" in done.stderr


def test_the_pre_commit_hook_runs_the_pr_gate_and_make_hooks_installs_both():
    assert "exec make pr" in (HOOKS / "pre-commit").read_text()
    assert all((HOOKS / name).stat().st_mode & 0o111 for name in ("pre-commit", "commit-msg"))
    makefile = (ROOT / "Makefile").read_text()
    assert "git config core.hooksPath .githooks" in makefile
    assert "pr: lint test-fast" in makefile
