"""ReFrame checks around the project's examples; run them with ``reframe -c reframe_checks/``.

The configuration they need is generated from the site profiles by
``python -m clusterkit.reframe.config``; see docs/howto/site-staff/run-reframe.md.
"""
