"""The runners: what starts things on this machine, scaled down, and what reads what they
leave behind.

* the shims named ``sbatch``, ``srun``, ``bsub``, ``jsrun``, ``torchrun``, ``module``, ...
  (``entry``, written out by ``shimdir``): each judges its command line with
  :mod:`clusterkit.emulate` and then runs the job scaled down (``run_slurm``, ``run_lsf``,
  ``run_launchers``, ``run_tools``, over ``runtime``);
* ``slurmconf``: a real Slurm configuration for one machine, generated from a profile;
* ``stack_ci``: the training programs run under each software stack the pages name
  (``stack_pages``: which pages name which stacks and run which programs);
* ``program_lines``, ``lines_hook``: the lines of the example programs that ran, measured in
  every process; ``line_reasons``: why the others cannot run here;
* ``trainlog``: training logs read; ``horovod_wheel``: Horovod built for this environment.

May import: :mod:`clusterkit.sites`, :mod:`clusterkit.grammars`, :mod:`clusterkit.emulate`,
:mod:`clusterkit.commands`.
"""
