"""The estimate agrees with the world: every published figure of docs/estimate-figures.yaml (none of them a
parameter's source) is reproduced within 25%, or marked as a known disagreement with its reason."""

from __future__ import annotations

import pytest

from warmstart.estimate_figures import TOLERANCE, compare, load_figures, parameter_sources, render_table

FIGURES = load_figures()


@pytest.mark.parametrize("figure", FIGURES, ids=[f["id"] for f in FIGURES])
def test_each_published_figure_is_within_25_percent_or_a_known_disagreement(figure):
    comparison = compare(figure)
    if comparison.known_disagreement:
        # A mark that no longer holds is removed: the estimate came within the bound.
        assert not comparison.agrees, f"{comparison.id}: within {TOLERANCE:.0%} now; remove known_disagreement"
    else:
        assert comparison.agrees, (
            f"{comparison.id}: published {comparison.published_s:g} s, estimate {comparison.estimate_s:.1f} s "
            f"(ratio {comparison.ratio:.2f})"
        )


def test_at_least_15_agreeing_figures_from_at_least_4_independent_publishers():
    """Counted: a figure that is not a parameter's own run nor a sum of others; publishers by organisation."""
    agreeing = [c for c in (compare(f) for f in FIGURES) if c.agrees and not c.not_counted]
    assert len(agreeing) >= 15, render_table(agreeing)
    assert len({c.organisation for c in agreeing}) >= 4


def test_every_figure_names_its_source_and_setup():
    ids = [f["id"] for f in FIGURES]
    assert len(ids) == len(set(ids))
    for figure in FIGURES:
        assert {"publisher", "title", "url", "date"} <= set(figure["source"]), figure["id"]
        assert figure["what"] and figure["published_s"] > 0 and figure["setup"]["environment"]
        assert figure["estimate"]["phases"], figure["id"]


def test_the_parameters_sources_are_not_validation_figures():
    """No validation figure is a measurement a parameter comes from (the same URL and number), and every
    parameter source is cited in docs/estimate.md's parameter table."""
    from pathlib import Path

    sources = parameter_sources()
    used = {(s["url"], float(s["figure"])) for s in sources}
    for figure in FIGURES:
        assert (figure["source"]["url"], float(figure["published_s"])) not in used, figure["id"]
    text = (Path(__file__).resolve().parents[2] / "docs" / "estimate.md").read_text()
    parameters = text.split("## Parameters", 1)[1].split("\n## ", 1)[0]
    for source in sources:
        assert source["url"] in parameters, source["parameter"]


def test_the_docs_show_the_current_comparison():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "estimate.md").read_text()
    assert render_table([compare(f) for f in FIGURES]) in text, "regenerate: python -m warmstart.estimate_figures"
