"""How text is read, with no verdict on it.

* the command lines of real tools the emulation does not run: ``pip_cli``, ``conda_cli``,
  ``slurm_query`` (``squeue``, ``sacct``, ``scontrol``, ``seff``), ``reframe_cli``,
  ``tensorboard_cli``, ``profilers`` (Nsight Systems, rocprof, ...); ``trainer_help``: the
  options of the project's own trainers, read from their source; ``argparse_ast``: the
  argparse options of any script a job starts, read from its source as a contract;
* the pages: ``myst`` (a MyST page's code blocks, inline spans, markers, front matter and
  tabs, and the logical shell lines of a block or an example file), ``prose`` (paragraphs,
  sentences, inline spans sorted into commands, options and tool names), ``page_blocks``
  (the code blocks of any site's Markdown, reStructuredText or HTML page, with their page
  lines, and whether each is a job script);
* ``stale_commands``: the registry of commands gone stale (``lint/deprecations.yaml``) and
  how each entry is found in a command line, which the page lint and the job-script checker
  both apply.

The options of the schedulers and launchers that the emulation judges are read inside
:mod:`clusterkit.emulate` (``slurm_options``, ``lsf_options``, ``launcher_options``, ...).

May import: :mod:`clusterkit.sites`.
"""
