"""The estimate beside published measurements (docs/estimate-figures.yaml): each figure's setup made into a config
(an environment file with settings changed, the catalog's facts overridden where the measured machine differs),
estimated with the same code as `plan --estimate`, and compared."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from warmstart.catalog import Catalog, default_catalog
from warmstart.checks.fix import Edit, Fix, apply_fix
from warmstart.estimate import estimate_model
from warmstart.loader import parse_config

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "estimate-figures.yaml"
TOLERANCE = 0.25  # a figure within 25% of the estimate agrees


@dataclass(frozen=True)
class Comparison:
    id: str
    publisher: str
    url: str
    what: str
    published_s: float
    estimate_s: float
    known_disagreement: str
    not_counted: str = ""

    @property
    def organisation(self) -> str:
        """Who published it, without the channel ("vLLM project (GitHub issue by a user)" -> "vLLM project")."""
        return self.publisher.split(" (", 1)[0]

    @property
    def ratio(self) -> float:
        return self.estimate_s / self.published_s

    @property
    def agrees(self) -> bool:
        return abs(self.ratio - 1) <= TOLERANCE


def load_figures(path: Path = FIGURES) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["figures"]


def parameter_sources(path: Path = FIGURES) -> list[dict[str, Any]]:
    """The measurements the parameters come from (none may be a validation figure)."""
    return yaml.safe_load(path.read_text())["parameter_sources"]


def _catalog(overrides: dict[str, dict]) -> Catalog:
    catalog = default_catalog()
    if not overrides:
        return catalog
    instances = dict(catalog.instances)
    for name, facts in overrides.items():
        instances[name] = instances[name].model_copy(update=facts)
    return Catalog(gpus=catalog.gpus, instances=instances)


def compare(figure: dict[str, Any]) -> Comparison:
    setup, wanted = figure["setup"], figure["estimate"]
    raw = yaml.safe_load((ROOT / "config" / f"{setup['environment']}.yaml").read_text())
    changes = Fix(tuple(Edit(path, value) for path, value in (setup.get("changes") or {}).items()))
    catalog = _catalog(setup.get("catalog") or {})
    config = parse_config(apply_fix(raw, changes), source=f"figure {figure['id']}", catalog=catalog)
    model = config.models[wanted.get("model", 0)]
    case = estimate_model(model, config, catalog).case(wanted["case"])
    return Comparison(
        id=figure["id"],
        publisher=figure["source"]["publisher"],
        url=figure["source"]["url"],
        what=figure["what"],
        published_s=float(figure["published_s"]),
        estimate_s=sum(case.seconds(phase) for phase in wanted["phases"]),
        known_disagreement=figure.get("known_disagreement", ""),
        not_counted=figure.get("not_counted", ""),
    )


def render_table(comparisons: list[Comparison]) -> str:
    """Markdown: published, estimate and their ratio per figure (for docs and the closing note)."""
    lines = ["| figure | published | estimate | ratio | |", "| --- | ---: | ---: | ---: | --- |"]
    for c in comparisons:
        verdict = "agrees" if c.agrees else ("known disagreement" if c.known_disagreement else "DISAGREES")
        verdict += " (not counted)" if c.not_counted else ""
        lines.append(f"| {c.id} | {c.published_s:g} s | {c.estimate_s:.1f} s | {c.ratio:.2f} | {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table([compare(figure) for figure in load_figures()]))
