"""How the config's rules run (warmstart/checks/rule.py): each declares what it needs, and runs only when that
holds, so no rule looks up a fact another rule has refused."""

from __future__ import annotations

from tests.synth import ROOT
from warmstart.catalog import default_catalog
from warmstart.checks.environment import TOPICS
from warmstart.checks.rule import POOL_FIELDS, RULES, Needs, Rule, run_rules
from warmstart.loader import load_config
from warmstart.problem import Problem


def _rule(name: str, needs: Needs, problems: list[Problem], ran: list[str]) -> Rule:
    def check(config, catalog):
        ran.append(name)
        return problems

    return Rule(name, needs, check)


def test_a_rule_runs_only_when_what_it_needs_holds():
    ran: list[str] = []
    pool_problem = Problem(f"{POOL_FIELDS}[0]", "unknown instance type", "pick one from the catalog")
    rules = [
        _rule("needs the pool", Needs.POOL_FACTS, [], ran),
        _rule("field", Needs.NOTHING, [pool_problem], ran),
        _rule("needs a valid config", Needs.VALID_CONFIG, [], ran),
    ]
    assert run_rules(rules, config=None, catalog=None) == [pool_problem]
    assert ran == ["field"]


def test_any_problem_holds_back_the_rules_that_need_a_valid_config_only():
    ran: list[str] = []
    other = Problem("models[0].image", "names no digest", "pin it")
    rules = [
        _rule("field", Needs.NOTHING, [other], ran),
        _rule("needs the pool", Needs.POOL_FACTS, [], ran),
        _rule("needs a valid config", Needs.VALID_CONFIG, [], ran),
    ]
    assert run_rules(rules, config=None, catalog=None) == [other]
    assert ran == ["field", "needs the pool"]


def test_every_rule_is_in_a_topic_and_the_shipped_configs_pass_them_all():
    topics = {topic.__name__ for topic in TOPICS}
    # A topic module left out of TOPICS would never register its rules.
    assert topics == {f"warmstart.checks.{p.stem}" for p in (ROOT / "warmstart" / "checks").glob("*_rules.py")}
    assert {r.name.rpartition(".")[0] for r in RULES} == topics
    assert len(RULES) >= 25  # the rules registered themselves (a registry of nothing would pass everything)
    for name in ("dev", "prod"):
        config = load_config(ROOT / "config" / f"{name}.yaml")
        assert run_rules(RULES, config, default_catalog()) == []
