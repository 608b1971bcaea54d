"""The emulated cluster is transactional: an ``up`` that fails half-way (a tool refusing) removes what it
made; one killed half-way (SIGKILL) leaves a state that says so, which ``status`` names and ``down``
clears by the naming scheme; and a cluster is reshaped or removed only by whoever brought it up. Needs
root and iproute2, opt-in as the other emulated-cluster tests (HPCBENCH_TEST_NETNS=1)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from test_emulated import CLUSTER, cluster, leftovers

from hpcbench.errors import UsageError
from hpcbench.launch.emulated import bring_up, owner, take_down
from hpcbench.launch.local import EMULATED_STATE, emulated_nodes

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]


@pytest.fixture
def clean():
    if os.environ.get("HPCBENCH_TEST_NETNS") != "1":
        pytest.skip("set HPCBENCH_TEST_NETNS=1 (as root) to test the emulated cluster's up and down")
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("the emulated cluster needs root and iproute2 (ip, tc)")
    if EMULATED_STATE.exists() or leftovers():
        pytest.skip("an emulated cluster (or what one left) is here already: these tests make and remove their own")
    yield
    subprocess.run([str(CLUSTER), "down", "--owner", owner() or "user"], capture_output=True, timeout=120)
    assert not leftovers()


def shim(tmp_path, body: str) -> dict[str, str]:
    """An environment whose ``tc`` is this shell body instead of iproute2's."""
    (tmp_path / "tc").write_text(f"#!/bin/sh\n{body}\n")
    (tmp_path / "tc").chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}


def test_an_up_that_fails_half_way_removes_everything_it_made(clean, tmp_path):
    env = shim(tmp_path, 'echo "RTNETLINK answers: Invalid argument" >&2; exit 2')
    proc = subprocess.run([str(CLUSTER), "up", "--nodes", "3", "--rate", "50mbit"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2 and "created node enode1" in proc.stdout
    assert "up failed at:" in proc.stderr and "everything it made was removed" in proc.stderr
    assert not leftovers()
    assert "no emulated cluster" in cluster("status").stdout


def test_an_up_killed_half_way_is_named_by_status_refused_by_runs_and_cleared_by_down(clean, tmp_path):
    proc = subprocess.Popen([str(CLUSTER), "up", "--nodes", "3", "--rate", "50mbit"], stdout=subprocess.PIPE,
                            text=True, env=shim(tmp_path, "sleep 60"), start_new_session=True)
    assert "created node enode1" in proc.stdout.readline() + proc.stdout.readline()
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert leftovers()
    status = cluster("status")
    assert status.returncode == 1 and "a half-built emulated cluster" in status.stdout and "enode1" in status.stdout
    with pytest.raises(UsageError, match="half-built"):
        emulated_nodes()
    down = cluster("down")
    assert down.returncode == 0 and not leftovers() and not EMULATED_STATE.exists()


def test_a_cluster_is_reshaped_or_removed_only_by_whoever_brought_it_up(clean):
    assert cluster("up", "--nodes", "2", "--rate", "50mbit").returncode == 0
    assert owner() == "user"
    with pytest.raises(UsageError, match="brought up by 'user', not 'sim_fidelity': it is left as it is"):
        bring_up("sim_fidelity", 2, "20mbit")
    take_down("sim_fidelity")
    refused = cluster("down", "--owner", "sim_fidelity")
    assert refused.returncode == 2 and "left as it is" in refused.stderr
    assert "links 50mbit" in cluster("status").stdout and emulated_nodes() == 2
    assert cluster("down").returncode == 0 and not leftovers()
    bring_up("reproduce", 2, "20mbit")
    assert owner() == "reproduce" and "owner 'reproduce'" in cluster("status").stdout
    take_down("reproduce")
    assert owner() is None and not leftovers()
