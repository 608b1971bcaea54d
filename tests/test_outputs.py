"""No result is ever lost to another run: refused targets, unique temporary names, no-replace renames."""
import subprocess

import pytest

from hpcbench.errors import UsageError
from hpcbench.launch.local import launch_env, mpi_command, own_lines
from hpcbench.results.paths import check_target, move_into_place, partial_name, run_id
from hpcbench.results.store import read_run

from conftest import mpirun, ok, requires_mpi

pytestmark = pytest.mark.both  # depends on the MPI family: run under each (.ci/run)


def test_an_existing_result_is_refused_unless_overwrite(tmp_path):
    f = tmp_path / "r.h5"
    f.write_bytes(b"earlier result")
    with pytest.raises(UsageError, match="already exists; choose another name or pass --overwrite"):
        check_target(f, overwrite=False)
    check_target(f, overwrite=True)
    check_target(tmp_path / "new.h5", overwrite=False)


@pytest.mark.parametrize("overwrite", [False, True])
def test_overwrite_never_applies_to_devices_directories_or_paths_under_files(tmp_path, overwrite):
    with pytest.raises(UsageError, match="'/dev/null' is not a regular file"):
        check_target("/dev/null", overwrite)
    with pytest.raises(UsageError, match="is a directory"):
        check_target(tmp_path, overwrite)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="a part of the path is a file"):
        check_target(tmp_path / "file" / "r.h5", overwrite)


def test_the_final_rename_never_replaces_a_file_that_appeared_meanwhile(tmp_path):
    final = tmp_path / "r.h5"
    first = partial_name(final, "a")
    first.write_bytes(b"first run")
    assert move_into_place(first, final, overwrite=False, rid="a") == final
    second = partial_name(final, "b")
    second.write_bytes(b"second run")
    kept = move_into_place(second, final, overwrite=False, rid="b")
    assert kept == tmp_path / "r-b.h5" and kept.read_bytes() == b"second run"
    assert final.read_bytes() == b"first run" and sorted(p.name for p in tmp_path.iterdir()) == ["r-b.h5", "r.h5"]
    third = partial_name(final, "c")
    third.write_bytes(b"third run")
    assert move_into_place(third, final, overwrite=True, rid="c") == final and final.read_bytes() == b"third run"


def test_run_ids_are_unique_and_name_the_slurm_job():
    # 24 random bits: 200 ids hold a repeat once in about 840 draws of them (CI met one), two repeats once in
    # about 1.4 million; the id only separates runs of one name started in the same second
    assert len({run_id({}) for _ in range(200)}) >= 199
    assert run_id({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}).startswith("j4242.3-")


RUN = ("run", "--algo", "asgd", "--steps", "60", "--set", "evals=2")


@requires_mpi
@pytest.mark.timeout(300)
def test_two_concurrent_runs_with_one_out_both_keep_their_result(tmp_path):
    out = tmp_path / "same.h5"
    procs = [subprocess.Popen(mpi_command(3, [*RUN, "--seed", str(seed), "--out", str(out)]), env=launch_env(3),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    files = sorted(tmp_path.glob("*.h5"))
    assert len(files) == 2 and not list(tmp_path.glob("*.partial"))
    assert sorted(read_run(f).attrs["seed"] for f in files) == [1, 2]  # two complete, different results
    said = "".join(err for _, err in results)
    assert "appeared while this run was set up; the result goes to" in said


@requires_mpi
@pytest.mark.timeout(300)
def test_a_second_run_is_refused_before_training_and_overwrite_replaces(tmp_path):
    out = tmp_path / "r.h5"
    ok(mpirun(3, *RUN, "--out", str(out)))
    before = out.read_bytes()
    again = mpirun(3, *RUN, "--seed", "5", "--out", str(out))
    assert again.returncode == 2 and out.read_bytes() == before
    assert own_lines(again.stderr) == [
        f"hpcbench: error: --out {str(out)!r} already exists; choose another name or pass --overwrite to replace it"]
    ok(mpirun(3, *RUN, "--seed", "5", "--out", str(out), "--overwrite"))
    assert read_run(out).attrs["seed"] == 5
    refused = mpirun(3, *RUN, "--out", "/dev/null", "--overwrite")
    assert refused.returncode == 2 and "is not a regular file" in refused.stderr
