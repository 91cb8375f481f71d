"""Builders the test folders share: a shipped config as a document, what the loader says of one, and a recorded
pod start."""

import yaml

from contracts.start_record import StartTimeline
from tests.fixes import refused
from tests.synth import ROOT


def raw(name: str = "dev") -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


def problems(document: dict) -> list:
    """The refusals, each fix applied and checked (tests/fixes.py)."""
    return refused(document)


def only_problem(document: dict):
    found = problems(document)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def start_record(model: str, *, new_node: bool, compile_cache: str, phases: dict, image: str = "pulled") -> dict:
    created = 1_000_000.0
    total = sum(v for v in phases.values() if v)
    return StartTimeline(
        model=model,
        namespace=model,
        pod=f"{model}-{len(phases)}-{total:.0f}",
        uid="u",
        node="ip-10-0-0-1",
        start=0,
        outcome="ready",
        created=created,
        ready=created + total,
        new_node=new_node,
        image=image,
        restore="restored" if new_node else None,
        weights_source="s3",
        compile_cache=compile_cache,
        vllm_log_format="0.21",
        phases=phases,
    ).to_dict()
