"""Result files: round trip, and no file that reads as complete after a failed write."""
import json
import os

import numpy as np
import pytest

from hpcbench.errors import UsageError
from hpcbench.results.schema import SCHEMA_VERSION, RunRecord
from hpcbench.results.store import read_run, write_run
from hpcbench.telemetry.timeline import OPS, PHASES, Timeline


def record(**overrides) -> RunRecord:
    tl = Timeline(1)
    tl.add(1, "compute", 0.0, 0.5, op="Compute")
    fields = dict(
        attrs={"hpcbench_version": "0", "mode": "mpi", "algorithm": "asgd", "world_size": 2, "workers": 1,
               "model": "mlp", "dataset": "digits", "seed": 0, "status": "ok", "created_utc": "now",
               "config": {"algo": "asgd", "lr": 0.1}},
        provenance={"mpi_library_version": "MPICH", "git_dirty": False},
        per_rank={"hostnames": ["a", "b"], "devices": ["cpu", "cpu"]},
        timeline=tl.columns(), phases=PHASES, ops=OPS, clock_offsets=np.zeros(2),
        evals={"t": np.array([0.0, 1.0]), "samples": np.array([0, 32]), "updates": np.array([0, 1]),
               "loss": np.array([2.3, 1.0]), "accuracy": np.array([0.1, 0.5]), "consensus": np.full(2, np.nan)},
        tables={"updates": {"t": np.array([0.5]), "worker": np.array([1]), "staleness": np.array([0])}},
        summary={"wall_s": 1.0, "samples_per_s": 32.0}, final_params=np.arange(5, dtype=np.float32),
    )
    fields.update(overrides)
    return RunRecord(**fields)


def test_round_trip(tmp_path):
    path = write_run(tmp_path / "sub" / "r.h5", record())
    back = read_run(path)
    assert back.attrs["schema_version"] == SCHEMA_VERSION and back.attrs["status"] == "ok"
    assert back.attrs["config"] == {"algo": "asgd", "lr": 0.1}
    assert back.per_rank["hostnames"] == ["a", "b"]
    assert back.phases == PHASES and back.timeline["phase"][0] == PHASES.index("compute")
    assert back.ops == OPS and back.timeline["op"][0] == OPS.index("Compute")
    assert back.tables["updates"]["staleness"].tolist() == [0]
    assert back.summary["samples_per_s"] == 32.0 and back.final_params.tolist() == [0, 1, 2, 3, 4]


def test_failed_write_leaves_no_file(tmp_path):
    target = tmp_path / "r.h5"
    bad = record(summary={"wall_s": object()})  # h5py cannot store this: the write fails midway
    with pytest.raises(TypeError):
        write_run(target, bad)
    assert list(tmp_path.iterdir()) == []


def test_reading_something_else_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(UsageError, match="cannot read result file"):
        read_run(junk)


@pytest.mark.root  # mounts a tmpfs
def test_a_rewrite_that_finds_the_disk_full_keeps_the_last_file_and_says_why(tmp_path):
    import subprocess

    from hpcbench.errors import ResultWriteError
    from hpcbench.results.store import rewrite_run

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        path = write_run(disk / "r.h5", record())
        big = record(final_params=np.random.default_rng(0).normal(size=200_000).astype(np.float32))
        with pytest.raises(ResultWriteError) as err:
            rewrite_run(path, big)
        assert str(err.value).startswith(f"could not write the result file {str(path)!r}: ")
        assert "No space left on device" in str(err.value)
        assert read_run(path).final_params.tolist() == [0, 1, 2, 3, 4]  # the last complete write
        assert not list(disk.glob("*.partial"))
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


@pytest.mark.slow  # a Python killed mid-write
def test_a_writer_killed_mid_write_leaves_no_file_behind(tmp_path):
    # SIGKILL (what mpiexec sends the other ranks when one dies) runs no cleanup: the file being
    # written must have no name until it is complete.
    import signal
    import subprocess
    import sys

    code = ("import os, signal, sys; from pathlib import Path; from hpcbench.results.store import _unnamed_file; "
            "fd = _unnamed_file(Path(sys.argv[1])); assert fd is not None, 'no O_TMPFILE here'; "
            "os.write(fd, b'x' * 100000); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    if "no O_TMPFILE here" in proc.stderr:
        pytest.skip("this system or file system has no unnamed files (O_TMPFILE)")
    assert proc.returncode == -signal.SIGKILL
    assert list(tmp_path.iterdir()) == []
    path = write_run(tmp_path / "r.h5", record())  # and a complete write still gets its name
    assert [p.name for p in tmp_path.iterdir()] == ["r.h5"] and read_run(path).final_params.size == 5


def test_strings_with_nul_bytes_are_written_without_them(tmp_path):
    """Open MPI's MPI_Get_library_version ends in a NUL byte, which HDF5's variable-length strings
    refuse: every string a record carries (attributes, provenance, per-rank lists, the config) is
    written without its NULs instead of failing the run's first write."""
    version = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11\x00"
    rec = record(provenance={"mpi_library_version": version, "environment": {"OMPI_X": "a\x00b"}},
                 per_rank={"hostnames": ["a\x00", "b"], "devices": ["cpu", "cpu"]})
    rec.attrs["error"] = "why\x00"
    back = read_run(write_run(tmp_path / "r.h5", rec))
    assert back.provenance["mpi_library_version"] == version[:-1]
    assert back.per_rank["hostnames"] == ["a", "b"] and back.attrs["error"] == "why"
    assert json.loads(back.provenance["environment"]) == {"OMPI_X": "ab"}


def test_a_file_replaced_while_its_rewrite_is_being_built_is_left_alone(tmp_path, monkeypatch):
    import hpcbench.results.store as store
    from hpcbench.results.paths import identity

    target = tmp_path / "r.h5"
    write_run(target, record())
    mine = identity(target)
    build = store._write_file

    def replaced_meanwhile(partial, rec, final):  # another tool puts its file there while the image is built
        (tmp_path / "foreign").write_bytes(b"another tool's file")
        os.replace(tmp_path / "foreign", final)
        build(partial, rec, final)

    monkeypatch.setattr(store, "_write_file", replaced_meanwhile)
    assert store.rewrite_run(target, record(), mine) is False
    assert target.read_bytes() == b"another tool's file" and sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]
    monkeypatch.setattr(store, "_write_file", build)
    assert store.rewrite_run(target, record(), identity(target)) is True and read_run(target).attrs["status"] == "ok"
