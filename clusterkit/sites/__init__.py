"""The ground floor: the facts every other layer reads, kept as data, and the finding every
check reports.

* ``profiles``: the site profiles (``sites/<name>.yaml``, against ``sites/schema.yaml``);
  ``stacks``: the software stacks they list; ``substitutions``: their facts as MyST
  substitutions; ``lmod``: Lmod modulefiles written from a profile;
* ``channels``, ``container_images``: what the conda channels, wheel indexes and image
  registries that CI cannot reach offer (``contracts/channels/``, ``contracts/containers.yaml``);
  ``contracts``: the command-line contracts of Python scripts (``contracts/*.json``);
  ``results``: recorded figures (``results/*.yaml``);
* ``refresh``, ``stack_refresh``, ``changes``: a profile refreshed from the live system's
  output, as proposed changes; ``published``, ``published_manifest``: the job scripts the
  sites publish in their own documentation, gathered with their expected verdicts;
* ``root``: where the data is read from (the checkout, or the copy installed with the
  package);
* ``errors``: :class:`~clusterkit.sites.errors.Finding` (file, line, rule, message) and
  ``CheckError``.

May import: nothing else of clusterkit.
"""
