"""The pages: what tests every block and inline command, what builds them, and the static pass.

* ``pagetest``: the Sybil router -- each code block to its test (Python run, shell through
  :mod:`clusterkit.commands`, job scripts through :mod:`clusterkit.emulate`, output through
  the log parser, ``fragments`` against the upstream function they go into);
  ``inline_check``: inline code in sentences;
* ``sphinxext``: the directives that render site facts, with ``results_plot``'s scaling plots
  and ``trainer_parsers``' option tables;
* ``coverage``: how each block was tested; ``content`` (``option_units``,
  ``cited_headings``): what pages and comments say; ``published_collect``,
  ``published_check``, ``published_page``: the sites' published job scripts gathered from
  their documentation repositories, the emulator against them, and the page of what it found;
* ``site_pages``: the rules each site's pages keep (landing matrix, reference page, trainer
  option pages, tab labels, no fill-in marker left); ``scaffold``: ``new-site``, the files of a
  new site with its facts as fill-in markers;
* ``fast``: every static check, in one command.

May import: :mod:`clusterkit.sites`, :mod:`clusterkit.grammars`, :mod:`clusterkit.emulate`,
:mod:`clusterkit.commands`, :mod:`clusterkit.runs`.
"""
