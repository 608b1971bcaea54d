"""The result-file contract: one HDF5 file per run. Names may grow, never silently change.

Bump SCHEMA_VERSION whenever a name or meaning changes; readers refuse newer major versions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# 2: /server/updates gained lr and echo_bytes; /server/too_stale became /server/late (gradients after
#    the budget); final_models' x_sum became mass (Σ w·z); /server/learning_rate; config.schedule.
SCHEMA_VERSION = 2

ROOT_ATTRS = ("schema_version", "hpcbench_version", "mode", "algorithm", "world_size", "workers", "model",
              "dataset", "seed", "status", "created_utc", "config")
PROVENANCE_ATTRS = ("mpi_library_version", "mpi_vendor", "mpi4py_version", "torch_version", "numpy_version",
                    "h5py_version", "python_version", "git_commit", "git_dirty", "slurm_job_id",
                    "progress_mode")
PROVENANCE_PER_RANK = ("hostnames", "devices")
TIMELINE_COLUMNS = ("rank", "step", "phase", "op", "t_start", "t_end", "nbytes")
EVAL_COLUMNS = ("t", "samples", "updates", "loss", "accuracy", "consensus")
UPDATE_COLUMNS = ("t", "worker", "version_used", "version_applied", "staleness", "penalty_mean", "gap_mean", "lr",
                  "echo_bytes")
SUMMARY_ATTRS = ("wall_s", "samples", "samples_per_s", "updates", "final_loss", "final_accuracy",
                 "time_to_target_s", "median_step_s", "data_fraction", "compute_fraction",
                 "communicate_fraction", "wait_fraction", "staleness_p50", "staleness_p99")


@dataclass
class RunRecord:
    """Everything one run writes, as plain Python and numpy values."""

    attrs: dict[str, Any]
    provenance: dict[str, Any]
    per_rank: dict[str, list[str]]
    timeline: dict[str, np.ndarray]
    phases: tuple[str, ...]
    ops: tuple[str, ...]
    clock_offsets: np.ndarray
    evals: dict[str, np.ndarray]
    tables: dict[str, dict[str, np.ndarray]]  # "updates" → /server/updates, others beside it
    summary: dict[str, Any]
    final_params: np.ndarray
    simulation: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def algorithm(self) -> str:
        return str(self.attrs["algorithm"])

    @property
    def workers(self) -> int:
        return int(self.attrs["workers"])

    @property
    def mode(self) -> str:
        return str(self.attrs["mode"])
