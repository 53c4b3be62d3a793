"""Command-line grammars of tools the scheduler emulation does not run (queries, ...)."""
