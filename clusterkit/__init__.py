"""clusterkit: site profiles, scheduler emulation and page checks for the tested HPC guide."""

__version__ = "0.1.0"
