"""ReFrame: its configuration generated from the site profiles (``config``), and its run
reports imported into the recorded results (``results``). The checks themselves are in
``reframe_checks/`` at the top of the repository.

May import: :mod:`clusterkit.sites`, :mod:`clusterkit.grammars`.
"""
