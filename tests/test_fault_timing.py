"""When an injected fault comes on a rank (runtime/mpi/faults.py, as the driver sees it), without MPI."""
import time

import pytest

pytestmark = pytest.mark.fast


def test_a_fault_due_during_a_modeled_compute_comes_on_time_not_when_the_compute_ends():
    """Issue 58: a rank sleeping through a modeled compute of 0.4 s wakes when its fault is due (0.05 s in),
    as the simulator's worker dies mid-compute; before, the fault came when the compute ended, and the
    detection measured held up to a whole compute more."""
    from hpcbench.config import Faults
    from hpcbench.runtime.mpi.driver import MpiDriver
    from hpcbench.runtime.mpi.faults import Injector

    start = time.monotonic()
    fired = []

    class Noted(Injector):
        def check(self, now, step):
            if now - self.start >= self.fault.at:
                fired.append(now - self.start)
                self.fault = type(self.fault)()  # came: nothing more is due

    driver = MpiDriver.__new__(MpiDriver)
    driver.clock, driver.step = time.monotonic, 1
    driver.fault = Noted(Faults.parse("kill:1@0.05"), 1, start)
    driver._until(start + 0.4, [])
    assert len(fired) == 1 and 0.05 <= fired[0] < 0.15, fired
