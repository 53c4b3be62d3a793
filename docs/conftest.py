"""Collect every code block of every page with Sybil; clusterkit.pages.pagetest routes them."""

from sybil import Sybil

from clusterkit.pages.pagetest import parsers, read_trainers_without_frameworks

pytest_collect_file = Sybil(parsers=parsers(), patterns=["*.md"]).pytest()
STUBBED = read_trainers_without_frameworks()


def pytest_report_header(config):
    return STUBBED
