"""Several nodes on this machine: real MPI runs across network namespaces joined by shaped links.

Opt-in (root): with HPCBENCH_TEST_NETNS=1 (CI sets it) the tests bring up an emulated cluster with
jobs/local/emulated-cluster.sh, run parameter-server, gossip and all-reduce jobs across its nodes, and
take it down again; otherwise they skip and say how to enable them.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.launch.local import EMULATED_STATE, launch_env, mpi_command, mpiexec_path
from hpcbench.results.store import read_run
from hpcbench.runtime.mpi.placement import gpu_index

from conftest import requires_mpi

pytestmark = [requires_mpi, pytest.mark.root, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "jobs" / "local" / "emulated-cluster.sh"
NODES = ("enode1", "enode2", "enode3")
FLOATS = 100_000  # 400 KB messages
RATES = {"50mbit": 50e6 / 8, "400mbit": 400e6 / 8}  # bytes per second


def cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLUSTER), *args], capture_output=True, text=True, timeout=120)


def leftovers() -> list[str]:
    """What an emulated cluster leaves on the machine: namespaces, links, hosts lines, state."""
    found = [line for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
             if line.startswith("enode")]
    found += [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.split("\n")
              if "enode" in line or "hpcb-br0" in line]
    found += [line for line in Path("/etc/hosts").read_text().splitlines() if "hpcbench-emulated" in line]
    found += [str(p) for p in (EMULATED_STATE, *(Path("/etc/netns") / n for n in NODES)) if p.exists()]
    return found


@pytest.fixture(scope="module")
def nodes():
    if os.environ.get("HPCBENCH_TEST_NETNS") != "1":
        pytest.skip("set HPCBENCH_TEST_NETNS=1 (as root) to bring up an emulated cluster of network namespaces "
                    "with jobs/local/emulated-cluster.sh for these tests")
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("the emulated cluster needs root and iproute2 (ip, tc)")
    if EMULATED_STATE.exists():
        pytest.skip("an emulated cluster is already up: these tests make (and remove) their own")
    made = cluster("up", "--nodes", "3", "--rate", "50mbit")
    try:
        if made.returncode != 0:
            pytest.skip(f"could not bring up the emulated cluster here: {made.stderr.strip()[-300:]}")
        yield made.stdout
    finally:
        cluster("down")


def link_bytes(node: str) -> int:
    """Bytes that crossed ``node``'s link so far, both ways (counted at the bridge's end)."""
    out = subprocess.run(["ip", "-j", "-s", "link", "show", f"v-{node}"], capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout)[0]["stats64"]
    return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])


def run_across(tmp: Path, algo: str, *extra: str, ranks: int = 4) -> tuple[object, int]:
    """``algo`` on ``ranks`` ranks over the 3 nodes, filled in turn (payload workload); → (its record,
    bytes over enode2's link)."""
    out = tmp / f"{algo}.h5"
    args = ["run", "--algo", algo, "--model", "payload", "--set", f"payload.params={FLOATS}",
            "--compute", "gamma:shape=100,mean=0.005", "--steps", "10", "--out", str(out), "--overwrite", *extra]
    env = {**launch_env(ranks), "MPIEXEC": mpiexec_path()}
    before = link_bytes("enode2")
    proc = subprocess.run(mpi_command(ranks, args, emulated=True), env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    return read_run(out), link_bytes("enode2") - before


def test_up_says_what_it_made_and_is_idempotent(nodes):
    assert "created node enode1 (198.18.0.1)" in nodes and "created bridge hpcb-br0" in nodes
    again = cluster("up", "--nodes", "3", "--rate", "50mbit")
    assert again.returncode == 0 and "created" not in again.stdout
    status = cluster("status").stdout
    assert "3 nodes, links 50mbit" in status and status.count(" up ") == 3
    hosts = Path("/etc/hosts").read_text()
    assert hosts.count("hpcbench-emulated") == 3 and "198.18.0.2 enode2" in hosts


def test_bad_options_are_one_line_and_change_nothing(nodes):
    for args, message in [(("up", "--nodes", "1", "--rate", "1gbit"), "--nodes must be 2..16"),
                          (("up", "--nodes", "2", "--rate", "fast"), "--rate must be a tc rate"),
                          (("sideways",), "unknown command 'sideways'; valid: up")]:
        proc = cluster(*args)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "3 nodes, links 50mbit" in cluster("status").stdout


def test_a_run_launches_only_on_its_owners_cluster(nodes, tmp_path):
    args = ["run", "--algo", "asgd", "--model", "payload", "--steps", "2", "--out", str(tmp_path / "r.h5")]
    env = {**launch_env(3), "MPIEXEC": mpiexec_path(), "HPCBENCH_EMULATED_OWNER": "someone-else"}
    proc = subprocess.run(mpi_command(3, args, emulated=True), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "the emulated cluster up now is 'user''s, not 'someone-else''s" in proc.stderr
    assert not (tmp_path / "r.h5").exists() and "3 nodes, links 50mbit" in cluster("status").stdout


@pytest.mark.parametrize("algo", ["asgd", "gossip", "allreduce"])
def test_a_run_across_nodes_records_its_placement_and_its_traffic_crosses_the_links(nodes, tmp_path, algo):
    rec, crossed = run_across(tmp_path, algo)
    assert rec.attrs["status"] == "ok" and rec.summary["samples"] == 10 * 3 * 32  # the whole budget
    # Slurm's block placement: rank 0 and worker 1 on the first node, workers 2 and 3 on the second.
    assert rec.per_rank["hostnames"] == ["enode1", "enode1", "enode2", "enode2"]
    assert rec.per_rank["local_ranks"] == ["0", "1", "0", "1"]
    assert rec.provenance["network"] == "emulated nodes=3,rate=50mbit,burst=256kb"
    assert json.loads(rec.provenance["environment"])["UCX_TLS"] == "tcp,self"
    # What the second node's ranks sent and received went over its link (over shared memory, almost
    # nothing would: ~15 KB for 4 MB all-reduced), and not many times more. At least a step's vectors
    # each way: asgd's remote workers take what is left of the shared budget by a worker beside rank 0
    # (4 in a loaded CI run here).
    timeline = rec.timeline
    remote = (timeline["rank"] >= 2) & (timeline["op"] != rec.ops.index("Compute"))
    moved = int(timeline["nbytes"][remote].sum())
    assert moved > 2 * 4 * FLOATS
    assert 0.5 * moved < crossed < 4 * int(timeline["nbytes"].sum()) + 5_000_000


def test_a_shared_budget_counts_from_zero_when_rank0_is_alone_on_its_node(nodes, tmp_path):
    # One rank per node: rank 0's windows are not in memory any other rank maps, where MPI leaves
    # them as it found them; the budget counter must still start at zero.
    rec, _ = run_across(tmp_path, "gossip", ranks=3)
    assert rec.per_rank["hostnames"] == ["enode1", "enode2", "enode3"]
    assert rec.summary["samples"] == 10 * 2 * 32


def test_rank0_as_an_extra_task_leaves_each_worker_a_gpu_of_its_own(nodes, tmp_path):
    # The layout of `sweep --rank0 extra` on 2 nodes × 2 GPUs: 5 tasks, block-placed (3 on the first
    # node), each seeing its node's 2 GPUs. The run records where each rank was; the mapping a rank makes
    # from that must give the 4 workers the 4 GPUs, one each.
    out = tmp_path / "extra.h5"
    args = ["run", "--algo", "asgd", "--model", "payload", "--set", "payload.params=1000", "--steps", "5",
            "--compute", "gamma:shape=100,mean=0.001", "--out", str(out)]
    env = {**launch_env(5), "MPIEXEC": mpiexec_path()}
    cmd = mpi_command(5, args, emulated=True)
    cmd[cmd.index("-ppn") + 1] = "3"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    rec = read_run(out)
    hosts, local = rec.per_rank["hostnames"], [int(i) for i in rec.per_rank["local_ranks"]]
    assert hosts == ["enode1"] * 3 + ["enode2"] * 2
    gpus = [(hosts[r], gpu_index(r, local[r], hosts[r] == hosts[0], visible=2)) for r in range(5)]
    assert sorted(gpus[1:]) == [("enode1", 0), ("enode1", 1), ("enode2", 0), ("enode2", 1)]
    assert gpus[0] == ("enode1", 0)  # rank 0 evaluates beside worker 1


def test_shaped_links_slow_an_all_reduce_as_their_rate_says(nodes, tmp_path):
    medians = {}
    for rate in RATES:
        assert cluster("up", "--nodes", "3", "--rate", rate).returncode == 0  # reshapes in place
        rec, crossed = run_across(tmp_path, "allreduce", "--set", "evals=1")
        assert rec.provenance["network"].startswith(f"emulated nodes=3,rate={rate}")
        # No run moves its bytes faster than its link (each direction carries about half of them; some
        # crossed before and after the timed window: start-up, the final gather).
        assert rec.summary["wall_s"] > 0.5 * (crossed / 2) / RATES[rate]
        medians[rate] = rec.summary["median_step_s"]
    assert medians["50mbit"] > 3 * medians["400mbit"]  # 8x the rate; start-up and compute do not shrink
    cluster("up", "--nodes", "3", "--rate", "50mbit")


def test_a_network_sweep_across_nodes_fits_the_rate_of_the_links(nodes, tmp_path):
    """hpcbench comm over the 50 Mbit/s links: the peer on another node fits their rate (large messages,
    past the token bucket's burst), the peer on rank 0's own node a far faster one, and simulate takes
    the links between nodes."""
    from hpcbench.results.commfile import read_comm

    out = tmp_path / "comm.h5"
    args = ["comm", "-b", "256K", "-e", "4M", "-f", "4", "--ops", "sendrecv", "--iters", "4", "--warmup", "1",
            "--out", str(out)]
    env = {**launch_env(4), "MPIEXEC": mpiexec_path()}
    proc = subprocess.run(mpi_command(4, args, emulated=True), env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    fits = {fit.link: fit for fit in read_comm(out).fits}
    assert fits["inter-node"].bandwidth == pytest.approx(RATES["50mbit"], rel=0.3)
    assert fits["intra-node"].bandwidth > 10 * RATES["50mbit"]
    code = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", "--algo", "asgd", "--workers", "2",
                           "--steps", "3", "--numerics", "off", "--network", str(out), "--out", str(tmp_path / "s.h5")],
                          capture_output=True, text=True, timeout=120)
    assert code.returncode == 0, code.stderr
    assert read_run(tmp_path / "s.h5").simulation["bandwidth"] == fits["inter-node"].bandwidth


def test_reproduce_sgp_sets_real_ratios_across_emulated_nodes_beside_the_simulator(nodes, tmp_path):
    out = tmp_path / "sgp"
    argv = [sys.executable, "-m", "hpcbench", "reproduce", "sgp", "--preset", "toy", "--mode", "mpi", "--max-ranks",
            "3",
            "--emulated", "--out-dir", str(out)]
    mine = subprocess.run(argv, capture_output=True, text=True, timeout=120)  # someone else's cluster is up
    assert mine.returncode == 2 and "owner 'user''s: it is left as it is" in mine.stderr, mine.stderr
    assert "3 nodes, links 50mbit" in cluster("status").stdout
    cluster("down")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    finally:
        assert not leftovers()  # it took down the cluster it brought up
        cluster("up", "--nodes", "3", "--rate", "50mbit")  # this module's, as it was
    assert proc.returncode == 0, proc.stderr[-2000:]
    points = json.loads((out / "verdict.json").read_text())["emulated"]
    assert [(p["rate"], p["algo"]) for p in points] == [(r, a) for r in ("1gbit", "100mbit")
                                                         for a in ("allreduce", "sgp", "osgp")]
    assert all(p["real"] > 0 and p["simulated"] > 0 and not p["failure"] for p in points)
    report = (out / "report.md").read_text()
    assert "## Real runs across emulated nodes" in report and report.count("all-reduce's rate, simulated") == 4
    for p in points:  # each real run crossed links of its rate, and says so
        rec = read_run(out / "emulated" / f"{p['algo']}-{p['rate']}.real.h5")
        assert rec.provenance["network"].startswith(f"emulated nodes=5,rate={p['rate']}")
        assert rec.per_rank["hostnames"] == [f"enode{k}" for k in range(1, 6)]


def test_down_removes_exactly_what_up_made(nodes):
    hosts_before = [line for line in Path("/etc/hosts").read_text().splitlines() if "hpcbench-emulated" not in line]
    proc = cluster("down")
    assert proc.returncode == 0 and "removed node enode1" in proc.stdout
    assert leftovers() == []
    assert Path("/etc/hosts").read_text().splitlines() == hosts_before
    assert "no emulated cluster" in cluster("status").stdout
