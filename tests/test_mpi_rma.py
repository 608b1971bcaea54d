"""One-sided reads of a window rank 0 keeps republishing never see a mix of two versions."""
import re

import pytest

from conftest import mpirun, ok, requires_mpi

pytestmark = [requires_mpi, pytest.mark.timeout(300)]


def test_workers_never_read_a_torn_parameter_vector():
    proc = ok(mpirun(4, module="mpi_programs.torn_reads", env={"PYTHONPATH": "tests"}))
    found = re.findall(r"rank=(\d+) reads=(\d+) torn=(\d+)", proc.stdout)
    assert len(found) == 3, proc.stdout
    assert sum(int(r) for _, r, _ in found) >= 10  # the readers really overlapped the writer
    assert all(int(t) == 0 for _, _, t in found), proc.stdout
