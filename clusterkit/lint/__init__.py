"""Stale-command defences: static checks of the pages and examples against data.

* :mod:`~clusterkit.lint.deprecations`: the registry ``lint/deprecations.yaml`` and the lint
  over every code block, inline code span and example (historical markers excepted);
* :mod:`~clusterkit.lint.inventories`: ``module`` commands against each site's module list;
* :mod:`~clusterkit.lint.contracts_tool`: third-party CLI contracts (``contracts/*.json``),
  made from pinned upstream code, and the check of every script invocation;
* :mod:`~clusterkit.lint.refresh`: a site profile refreshed from live ``scontrol``,
  ``sacctmgr`` and Lmod output, as a reviewed diff and a proposal;
* :mod:`~clusterkit.lint.coverage`: how each code block was tested (the generated
  ``docs/project/test-coverage.md``);
* :mod:`~clusterkit.lint.content`: what pages and job-script comments say, against the
  trainers' help and the pages' headings; pinned installs; bindings against loader workers;
* :mod:`~clusterkit.lint.published`, :mod:`~clusterkit.lint.published_manifest`,
  :mod:`~clusterkit.lint.published_check`, :mod:`~clusterkit.lint.published_page`: the job
  scripts the sites publish themselves, their expected verdicts, the emulator's agreement
  with them and the page of the errors found (``docs/reference/published-scripts.md``);
* :mod:`~clusterkit.lint.fast`: all static checks in one quick command;
* :mod:`~clusterkit.lint.pages`: the page and shell readers they share.

Each has a ``python -m clusterkit.lint.<name>`` command.
"""
