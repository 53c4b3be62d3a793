"""Judges of the commands a page shows, each registered under the command's name.

* the router: ``shell`` splits a snippet (a code block, an included setup script, an inline
  code span) into commands, judges the shell's own paths (``paths``) and settings (``env``),
  and hands every other command to the judge ``registry`` holds for its name, looked up once;
* the judges (``@register("pip", "pip3")``; by kind for what a site's profile names: its
  launchers, wrappers and tools): ``jobs`` (submissions, allocations, launch lines,
  ``module``, Slurm's queries, through :mod:`clusterkit.emulate`), ``python``, ``conda``,
  ``containers``, ``copies``, ``downloads``, ``git``, ``tools`` (TensorBoard, ReFrame,
  the profilers, ``sudo``, ``sh -c``, a site's own tools);
* what installs are held to: ``installs`` (resolved for the node and Python meant),
  ``install_target`` (which node and Python that is), ``stack_installs`` (the stack built);
* ``tool_options``: the options a sentence gives to a tool;
* the static checks of the commands in every page and example: ``deprecations`` (stale
  commands), ``inventories`` (``module`` commands), ``contracts_tool`` (third-party scripts'
  options), ``binding``, ``pins``, ``script_envs``.

May import: :mod:`clusterkit.sites`, :mod:`clusterkit.grammars`, :mod:`clusterkit.emulate`.
"""
