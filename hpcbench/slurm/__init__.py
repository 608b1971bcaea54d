"""Slurm: job-script rendering, studies (sweeps) and their submission."""
