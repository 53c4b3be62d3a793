"""Collect every code block of every page with Sybil; clusterkit.pages.pagetest routes them."""

from sybil import Sybil

from clusterkit.pages.pagetest import parsers

pytest_collect_file = Sybil(parsers=parsers(), patterns=["*.md"]).pytest()
