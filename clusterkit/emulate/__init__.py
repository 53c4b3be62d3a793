"""Dry-run emulation of the schedulers and launchers of the sites: the judges of job requests,
in three layers whose imports point down only:

1. grammars: how the tools read their input, with no site knowledge -- ``script`` (a job
   script's bytes, lines, here-documents, commands and parameter expansions),
   ``slurm_options``, ``lsf_options``, ``launcher_options``, ``container_options``,
   ``torchrun``, ``accelerate_launch``, ``deepspeed_launch``, and ``launch_env`` (the
   environment each launcher gives a rank);
2. the core: ``report`` (findings and a plan in counts), ``registry`` (judges by name),
   ``shell_checks`` and ``script_vars`` (what bash makes of a script: syntax, ``$0`` in a
   batch job, variables never set), ``foreign`` (another scheduler's directives), ``stale``
   (the stale-command registry's entries in a script),
   ``body`` (the commands of a script, each handed to its judge), ``slurm_request``/``bsub``
   (what a script asks for), ``slurm`` (Slurm's rules), ``allocation`` (an ``salloc`` or
   login-node ``srun``), ``checkjob`` (the command line's entry);
3. judges, each registered by name: ``sbatch`` and ``lsf`` judge whole scripts; ``srun``,
   ``jsrun``, ``ddl``, ``containers``, ``programs``, ``hf_launchers`` (``accelerate launch``,
   ``deepspeed``), ``modules`` and ``wrappers`` (a site's own commands around a Slurm client)
   judge commands.

The shims that run the judged jobs here, scaled down, are in :mod:`clusterkit.runs`.

May import: :mod:`clusterkit.sites`, :mod:`clusterkit.grammars`.
"""
