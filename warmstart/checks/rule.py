"""How a rule says what it needs before it can run, instead of one hand-ordered gate.

A rule is a function of the config (and, if it takes it, the GPU catalog) that returns Problems. It declares what
must hold first: nothing (a field rule), the pool's catalog facts (no instance type of the GPU pool is unknown or
unfit: rules that look instance types up in the catalog), or a valid config (no problem at all: a rule that derives
every model's plan, such as the active set's size).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import IntEnum

from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem


class Needs(IntEnum):
    """What must hold before a rule runs, weakest first (the order the rules run in)."""

    NOTHING = 0
    POOL_FACTS = 1
    VALID_CONFIG = 2


POOL_FACTS = Needs.POOL_FACTS
VALID_CONFIG = Needs.VALID_CONFIG
# A problem on one of these fields means the pool's catalog facts cannot be trusted.
POOL_FIELDS = "compute.gpu_pool.instance_types"


@dataclass(frozen=True)
class Rule:
    name: str
    needs: Needs
    check: Callable[[EnvironmentConfig, Catalog], list[Problem]]


RULES: list[Rule] = []


def rule(*, needs: Needs = Needs.NOTHING):
    """Registers a rule (in the order its module defines it) with what it needs."""

    def register(function: Callable[..., list[Problem]]) -> Callable[..., list[Problem]]:
        takes_catalog = len(inspect.signature(function).parameters) == 2

        name = f"{function.__module__}.{function.__name__}"

        def check(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
            found = function(config, catalog) if takes_catalog else function(config)
            return [replace(problem, rule=name) for problem in found]

        RULES.append(Rule(name, needs, check))
        return function

    return register


def holds(needs: Needs, problems: list[Problem]) -> bool:
    """Whether what a rule needs holds, given the problems found by the rules that need less."""
    if needs is Needs.POOL_FACTS:
        return not any(p.field.startswith(POOL_FIELDS) for p in problems)
    if needs is Needs.VALID_CONFIG:
        return not problems
    return True


def run_rules(rules: list[Rule], config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    """Every rule whose needs hold, the weaker needs first: a rule never runs on what another rule refused."""
    problems: list[Problem] = []
    for level in Needs:
        if not holds(level, problems):
            break  # what this level needs does not hold, nor does anything stronger
        for each in [r for r in rules if r.needs is level]:
            problems += each.check(config, catalog)
    return problems
