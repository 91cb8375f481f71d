"""Every refusal's fix, as data, works when applied: each alternative a Problem offers (warmstart/checks/fix.py),
applied alone to the refused settings, removes that refusal and brings no new one, unless its words say so ("then
also ...") and it names the field. Every test that expects a refusal goes through `refused`, so each refusal the
suite knows has its fix applied."""

from __future__ import annotations

from warmstart.catalog import Catalog
from warmstart.checks.fix import apply_fix
from warmstart.config_file import ConfigError
from warmstart.loader import parse_config
from warmstart.problem import Problem


def refusals(document: dict, catalog: Catalog | None = None) -> list[Problem]:
    """What the loader refuses in these settings (nothing: accepted)."""
    try:
        parse_config(document, catalog=catalog)
    except ConfigError as error:
        return error.problems
    return []


def _key(problem: Problem) -> tuple[str, str]:
    """A refusal by where it points and where it is written (its words may name values a fix changes)."""
    return problem.field, problem.site


def assert_fixes_work(document: dict, problems: list[Problem], catalog: Catalog | None = None) -> None:
    before = {_key(p) for p in problems}
    for problem in problems:
        if problem.field.startswith("<"):
            continue  # the file itself (not UTF-8, not YAML, empty): its fix is an edit of the text, not a setting
        # Words and data agree: a fix in words has one as data, and a refusal with no fix has neither.
        assert bool(problem.fixes) == bool(problem.fix), f"fix in words but not as data, or the reverse: {problem}"
        for fix in problem.fixes:
            after = refusals(apply_fix(document, fix, use_examples=True), catalog)
            assert _key(problem) not in {_key(p) for p in after}, f"{problem}\n  still refused after {fix}"
            new = [
                str(p)
                for p in after
                if _key(p) not in before and not any(p.field.startswith(field) for field in fix.then_also)
            ]
            assert not new, f"{problem}\n  fix {fix} brings new refusals: {new}"
            if fix.then_also:
                assert "then also" in problem.fix, f"{problem}: a fix that leaves refusals must say so"


def refused(document: dict, catalog: Catalog | None = None) -> list[Problem]:
    """The refusals of these settings, each fix of each checked by applying it."""
    problems = refusals(document, catalog)
    assert problems, "accepted, but a refusal was expected"
    assert_fixes_work(document, problems, catalog)
    return problems
