"""A rank's process tuning: freed buffers kept, so buffers made every step are not faulted in again."""
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh Python each time

# Each step makes and frees three 400 kB buffers, as a parameter server's worker does (its read of the
# parameters, its gradient, the message): glibc trims the heap's top once they are freed together.
STEPS = """
import resource, sys
import numpy as np
from hpcbench.comm.process import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
def step():
    a, b, c = np.ones(100_000, np.float32), np.ones(100_000, np.float32), np.ones(100_000, np.float32)
for _ in range(5):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's mallopt")
def test_buffers_made_every_step_are_not_faulted_in_again_once_freed_memory_is_kept():
    pages = 3 * 400_000 // 4096  # one step's buffers, in pages
    assert faults("default") > 10 * pages  # what it is for: glibc gives them back and faults them in again
    assert faults("keep") < pages  # at most once in 100 steps
