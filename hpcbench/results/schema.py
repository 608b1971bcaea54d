"""The result-file contract: one HDF5 file per run. Names may grow, never silently change.

Bump SCHEMA_VERSION whenever a name or meaning changes; readers refuse newer major versions.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# 2: /server/updates gained lr and echo_bytes; /server/too_stale became /server/late (gradients after
#    the budget); final_models' x_sum became mass (Σ w·z); /server/learning_rate; config.schedule.
# 3: /evals gained val_loss and val_accuracy (the validation split held out by val_fraction; NaN
#    without one); /summary gained final_val_loss and final_val_accuracy.
# 4: /provenance gained network (the emulated links a run crossed; "" before and elsewhere) and the
#    per-rank local_ranks.
# 5: /summary gained bytes_per_sample (the workers' bytes moved per training sample; compressed
#    all-reduces count in the type they travel in).
# 6: /server/failures (workers lost during the run, where the MPI lets the others go on, and in the
#    simulator); /summary gained workers_lost, recovery_s and samples_lost; the timeline phase "recover".
#    Later, without a bump (names grew, none changed): an algorithm may add per-update means (NAME_mean) to
#    /server/updates, and their distributions to /summary (dc-asgd's compensation_mean); /summary gained
#    lost_after_training (workers that died after they had trained, whose timelines are not in the file)
#    and faults_unfired (faults asked for that never came: the run ended first); read as 0 where absent;
#    /server/stalls (workers silent past stall_s that came back) and /summary stalls, longest_stall_s and
#    wait_after_budget_s (the part of wall_s after the last sample was counted); read as 0 where absent.
SCHEMA_VERSION = 6

# Every name a result file holds is declared here, once; the writer refuses any other, the reader,
# the report and the algorithms take their names from here.
ROOT_ATTRS = ("schema_version", "hpcbench_version", "mode", "algorithm", "world_size", "workers", "model",
              "dataset", "seed", "status", "error", "created_utc", "config")
# The groups a result file holds (and each table under /server is a group of its columns).
GROUPS = ("provenance", "timeline", "evals", "server", "summary", "model", "simulation")
# How a run ended. Only "ok" files are complete; the others hold what rank 0 had recorded when the
# run failed (its own timeline, the evaluations, the server's tables) and the error line in "error".
# "incomplete": the run had not finished at rank 0's last flush (it was killed, or is still running);
# "error" then says when that flush was.
STATUSES = ("ok", "failed", "timeout", "aborted", "incomplete")
PROVENANCE_ATTRS = ("hpcbench_version", "python_version", "torch_version", "numpy_version", "h5py_version",
                    "cuda_version", "git_commit", "git_dirty", "platform", "environment", "progress_mode",
                    "slurm_job_id", "slurm_array_job_id", "slurm_array_task_id", "slurm_job_nodelist", "slurm_nnodes",
                    "slurm_ntasks", "slurm_tasks_per_node", "mpi_library_version", "mpi_vendor", "mpi_standard",
                    "mpi4py_version", "network", "fault_tolerance")
# "network": the links the ranks ran over when they were emulated (jobs/local/mpiexec-emulated sets
# HPCBENCH_EMULATED, e.g. "emulated nodes=3,rate=100mbit,burst=256kb"); "" on a real machine or cluster.
# "fault_tolerance": "ulfm" where the ranks outlived a failed one (Open MPI launched with ULFM),
# "simulated" in a simulation, "none" where a failed rank ends the run (schema 6; "" before).
SIM_PROVENANCE_ATTRS = ("sim_wall_s", "sim_events")  # the simulator's own cost, in sim mode only
# local_ranks: each rank's index among the ranks on its node (schema 4; "" in older files)
PROVENANCE_PER_RANK = ("hostnames", "devices", "threads", "local_ranks")
TIMELINE_COLUMNS = ("rank", "step", "phase", "op", "t_start", "t_end", "nbytes")
EVAL_COLUMNS = ("t", "samples", "updates", "loss", "accuracy", "consensus", "val_loss", "val_accuracy")
# /server/<table>: rows an algorithm records on rank 0, "t" first (stamped by the driver), then the
# values of its ``Record(table, values)`` in this order. Everyone names a table by these constants.
UPDATES = "updates"  # one row per gradient a parameter server applied
LATE = "late"  # gradients that arrived after the budget was spent
FINAL_MODELS = "final_models"  # each decentralised worker's end
LEARNING_RATE = "learning_rate"  # the rate each worker reported using
FAILURES = "failures"  # each worker lost during the run, as rank 0 learned of it
STALLS = "stalls"  # each time a worker fell silent past stall_s and was heard again (MPI runs)
TABLES = {
    UPDATES: ("t", "worker", "version_used", "version_applied", "staleness", "penalty_mean", "gap_mean", "lr",
              "echo_bytes"),
    LATE: ("t", "worker", "version_used"),
    FINAL_MODELS: ("t", "worker", "samples", "updates", "weight", "mass"),
    LEARNING_RATE: ("t", "worker", "samples", "lr"),
    # samples: the worker's as rank 0 had counted them (applied, or reported); samples_lost: its work
    # that reached no survivor or server (the batch it was computing, its steps since its team's last
    # collective, its claims from the budget no report accounts for)
    FAILURES: ("t", "worker", "samples", "samples_lost"),
    # t: when the worker fell silent (its last heartbeat before the silence, on rank 0's clock)
    STALLS: ("t", "worker", "duration_s"),
}
# Columns a table gains when the record is built (from the transport's and the timelines' knowledge):
# steps: the steps the worker had completed, as rank 0 had counted them; t_detected: when rank 0's MPI
# reported the failure; t_death: when the worker died, where the run knows it (an injected or simulated
# kill; NaN otherwise); detected_by: the code, in DETECTED_BY, of how rank 0 learned it; recovery_s:
# from the death (else its detection) until every survivor began a new step.
DERIVED_COLUMNS = {FAILURES: ("steps", "t_detected", "t_death", "detected_by", "recovery_s")}
DETECTED_BY = ("notification", "receive", "send", "heartbeat", "collective", "read", "accumulate", "notice",
               "simulated")
# An algorithm may add columns to the updates table (its layout declares them), each a per-update mean
# named NAME_mean; its summary then holds NAME_mean, NAME_p50 and NAME_p99 over the updates, as for the
# table's own distributions below.
ADDED_SUFFIX = "_mean"
DISTRIBUTED = ("staleness", "penalty_mean", "gap_mean")  # the updates columns the summary spreads out
PHASE_FRACTIONS = tuple(f"{p}_fraction" for p in ("data", "compute", "communicate", "wait", "update"))


def distribution_keys(column: str) -> tuple[str, str, str]:
    """The summary keys of an updates column's distribution: ``gap_mean`` → gap_mean, gap_p50, gap_p99."""
    stem = column.removesuffix(ADDED_SUFFIX)
    return (f"{stem}_mean", f"{stem}_p50", f"{stem}_p99")


def added_columns(table: str, columns: Iterable[str]) -> tuple[str, ...]:
    """The columns of ``table`` beyond the schema's (an algorithm's own, where it may add any)."""
    return tuple(c for c in columns if c not in TABLES.get(table, ()) + DERIVED_COLUMNS.get(table, ()))


def addable(table: str, column: str) -> bool:
    """Whether an algorithm may add ``column`` to ``table``: a per-update mean of the updates table."""
    return table == UPDATES and column.endswith(ADDED_SUFFIX) and column.isidentifier() and column.islower()


DISTRIBUTIONS = tuple(k for column in DISTRIBUTED for k in distribution_keys(column))
SUMMARY_KEYS = ("wall_s", "samples", "samples_per_s", "updates", "final_loss", "final_accuracy", "best_accuracy",
                "final_val_loss", "final_val_accuracy",
                "target_accuracy", "time_to_target_s", "median_step_s", "step_p90_s", "step_p99_s",
                "step_worker_min_s", "step_worker_max_s", "eval_s", "final_consensus", "bytes_per_sample",
                *PHASE_FRACTIONS, *DISTRIBUTIONS, "server_state_bytes", "too_stale", "warmup_s",
                "rank0_cpu_share", "workers_lost", "recovery_s", "samples_lost", "lost_after_training",
                "faults_unfired", "stalls", "longest_stall_s", "wait_after_budget_s")
# The summary a family of algorithms adds, beside the tables it is computed from
# (``telemetry.summary.family_summary``). A parameter server's log accounts for every gradient the
# workers computed: applied (UPDATES), answered as late (LATE), or "too_stale" (dropped, which must be 0).
FAMILY_SUMMARIES = {
    "server": ((UPDATES, LATE), ("late_gradients", "echoed_updates", "echo_bytes")),
}
SERVER_SUMMARY_KEYS = FAMILY_SUMMARIES["server"][1]


def family_of(tables: Mapping[str, object]) -> str:
    """Which family's summary a run's rank-0 tables call for: "server" or "" (none of its own)."""
    return next((family for family, (needs, _) in FAMILY_SUMMARIES.items() if all(t in tables for t in needs)), "")


# What a reader may rely on (``results/validation.py`` checks every file read against these): each
# root attribute's type, the modes, and the least value of the numbers readers do arithmetic with.
ATTR_TYPES = {"schema_version": int, "hpcbench_version": str, "mode": str, "algorithm": str, "world_size": int,
              "workers": int, "model": str, "dataset": str, "seed": int, "status": str, "error": str,
              "created_utc": str}
MODES = ("mpi", "sim")
# The algorithms a file may be of: every one hpcbench has had (tests/test_schema.py holds it to the registry).
ALGORITHM_NAMES = ("allreduce", "asgd", "sa-asgd", "ga-asgd", "dana", "dana-ga", "dc-asgd", "easgd", "easgd-sync",
                   "gossip", "sgp", "osgp", "local-sgd")
# Resolved configuration keys (where a file has them): numbers at least this large.
CONFIG_LEAST = {"steps_per_worker": 0, "budget_samples": 0, "eval_every": 1, "parameters": 0, "train_size": 0,
                "val_size": 0, "batch_size": 1, "evals": 1, "eval_samples": 1, "seed": 0, "lr": 0.0,
                "momentum": 0.0, "weight_decay": 0.0, "warmup_epochs": 0.0, "target_accuracy": 0.0,
                "max_steps": 0, "straggler_factor": 1.0}
# Summary counts: at least 0 (every other summary value is a number, NaN where there is none).
SUMMARY_COUNTS = ("samples", "updates", "late_gradients", "echoed_updates", "echo_bytes", "server_state_bytes",
                  "workers_lost", "samples_lost", "lost_after_training", "faults_unfired", "stalls")
# The columns every file since schema 1 has (those added later read as their neutral values).
READ_COLUMNS = {"timeline": ("rank", "step", "phase", "t_start", "t_end"),
                "evals": ("t", "samples", "updates", "loss", "accuracy"), "server": ("t", "worker")}
# A status older writers left on disk while they wrote (read as a run that did not finish).
OLD_STATUSES = ("running",)
# What the numbers mean, by where they are (a table's columns, or the summary's keys); every file read is
# checked against these (``results/validation.py``), and one that breaks any is refused as invalid.
# Accuracies: shares within 0..1, NaN where not measured (snapshots not scored, no validation split, no model).
ACCURACIES = {"evals": ("accuracy", "val_accuracy"),
              "summary": ("final_accuracy", "best_accuracy", "final_val_accuracy", "target_accuracy")}
# Counts: finite and >= 0 (steps, bytes, samples, model versions, staleness); the summary's are SUMMARY_COUNTS.
COUNTS = {"timeline": ("step", "nbytes"), "evals": ("samples", "updates"),
          "server": ("version_used", "version_applied", "staleness", "echo_bytes", "samples", "samples_lost", "steps",
                     "updates")}
# Never negative where measured (NaN where not; a loss is +inf where the model diverged).
NOT_NEGATIVE = {"evals": ("loss", "val_loss", "consensus"),
                "server": ("lr", "penalty_mean", "gap_mean", "weight", "recovery_s", "duration_s"),
                "summary": ("samples_per_s", "bytes_per_sample", "final_loss", "final_val_loss", "final_consensus",
                            "too_stale", "rank0_cpu_share", *PHASE_FRACTIONS, *DISTRIBUTIONS)}
# The summary's values that are the last evaluation's (summary key → /evals column), and the best accuracy.
LAST_EVALUATION = {"samples": "samples", "updates": "updates", "final_accuracy": "accuracy",
                   "final_val_accuracy": "val_accuracy"}


def undeclared(rec: RunRecord) -> list[str]:
    """Names in ``rec`` that this module does not declare (a writer refuses such a record)."""
    found = [f"attribute {k}" for k in rec.attrs if k not in ROOT_ATTRS]
    found += [f"provenance {k}" for k in rec.provenance if k not in PROVENANCE_ATTRS + SIM_PROVENANCE_ATTRS]
    found += [f"provenance {k}" for k in rec.per_rank if k not in PROVENANCE_PER_RANK]
    found += [f"timeline column {k}" for k in rec.timeline if k not in TIMELINE_COLUMNS]
    found += [f"evals column {k}" for k in rec.evals if k not in EVAL_COLUMNS]
    for name, table in rec.tables.items():
        found += [f"server/{name} column {k}" for k in added_columns(name, table) if not addable(name, k)]
    summary_keys = SUMMARY_KEYS + tuple(k for _, keys in FAMILY_SUMMARIES.values() for k in keys) + tuple(
        k for c in added_columns(UPDATES, rec.tables.get(UPDATES, {})) for k in distribution_keys(c))
    found += [f"summary {k}" for k in rec.summary if k not in summary_keys]
    return found


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
