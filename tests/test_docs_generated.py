"""What the site generates at build time: the trainers' option pages and the scaling plots."""

from __future__ import annotations

import sys

import pytest

from clusterkit.grammars import trainer_help
from clusterkit.pages import results_plot, trainer_parsers
from clusterkit.sites import results as res


@pytest.mark.parametrize("name", sorted(trainer_parsers.TRAINERS))
def test_option_pages_show_every_option_of_the_trainer(name):
    before = {k for k in sys.modules if k.split(".")[0] in trainer_parsers.FRAMEWORKS}
    parser = trainer_parsers.load_parser(trainer_parsers.TRAINERS[name])
    after = {k for k in sys.modules if k.split(".")[0] in trainer_parsers.FRAMEWORKS}
    assert after == before, "stand-in modules were left behind"
    shown = {f for a in parser._actions for f in a.option_strings if f.startswith("--")}
    source = set(trainer_help.options(trainer_parsers.TRAINERS[name]))
    negated = {f for f in shown if f.startswith("--no-") and "--" + f[5:] in shown}
    assert shown - {"--help"} - negated == {f for f in source if f.startswith("--")}
    helps = {f: a.help for a in parser._actions for f in a.option_strings}
    options = trainer_help.options(trainer_parsers.TRAINERS[name])
    plain = [f for f in options if options[f].help and not set("*`\\|_") & set(options[f].help)]
    assert plain, "no option with a help text free of markup to compare"
    for flag in plain:  # the page shows the source's own words (markup aside: escaped there)
        assert helps[flag] == options[flag].help, flag


def test_rst_markup_is_escaped():
    parser = trainer_parsers.pytorch_parser()
    data_dir = next(a for a in parser._actions if "--data-dir" in a.option_strings)
    assert "\\*.JPEG" in data_dir.help


def test_scaling_plot_of_the_wmlce_runs():
    rows = res.select(res.load_all(), "resnet50-wmlce")
    svg = results_plot.scaling_svg(rows)
    assert svg.startswith("<svg") and "perfect scaling" in svg
    assert svg == results_plot.scaling_svg(rows), "the same data must draw the same SVG"
    where = results_plot.where_measured([r for r in rows if r.metric == "throughput"])
    assert where and "reported by Bede documentation" in where[0]
    assert "V100" in where[0]


def test_where_measured_names_the_machine_of_measured_figures():
    rows = res.select(res.load_all(), "resnet50-pytorch", "single-h100")
    (line,) = results_plot.where_measured(rows)
    assert "measured by this project" in line and "H100" in line
