"""Collect every code block of every page with Sybil; see clusterkit.pagetest for the routing."""

from sybil import Sybil

from clusterkit.pagetest import parsers

pytest_collect_file = Sybil(parsers=parsers(), patterns=["*.md"]).pytest()
