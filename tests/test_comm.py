"""``hpcbench comm``: the sweep's sizes and columns as nccl-tests defines them, the α–β fit against
times made from known parameters, and a real sweep under MPI written, read back and taken by
``simulate --network FILE`` and ``calibrate --network FILE``."""

import re

import numpy as np
import pytest

from hpcbench.comm.linkfit import (
    INTER,
    INTRA,
    LinkFit,
    bus_factor,
    chosen_fit,
    fit_link,
    parse_bytes,
    parse_ops,
    sweep_sizes,
)
from hpcbench.errors import UsageError
from hpcbench.results.commfile import read_comm
from hpcbench.results.store import read_run
from hpcbench.runtime.sim.calibrate import calibrate

from conftest import cli, mpirun, ok, requires_mpi


def test_sizes_go_from_b_to_e_by_f_as_nccl_tests_does():
    assert parse_bytes("8", "-b") == 8 and parse_bytes("64K", "-b") == 65536 and parse_bytes("16m", "-e") == 16 << 20
    assert sweep_sizes(8, 1024, 2) == [8 * 2 ** k for k in range(8)]
    assert sweep_sizes(8, 100, 4) == [8, 32, 100]  # the largest asked for, last
    assert sweep_sizes(64, 64, 2) == [64]


@pytest.mark.parametrize("call, message", [
    (lambda: parse_bytes("1x", "-e"), "-e '1x': a size in bytes"),
    (lambda: sweep_sizes(7, 64, 2), "multiple of 4"),
    (lambda: sweep_sizes(64, 8, 2), "-e 8 is below -b 64"),
    (lambda: sweep_sizes(8, 8 << 30, 2), "at most 4G"),
    (lambda: parse_ops("allreduce,alltoall"), "unknown operation 'alltoall'; valid: allreduce, allgather, sendrecv"),
])
def test_impossible_sweeps_are_one_line(call, message):
    with pytest.raises(UsageError, match=message):
        call()


def test_bus_bandwidth_factor_is_nccl_tests():
    assert bus_factor("allreduce", 4) == pytest.approx(1.5) and bus_factor("allreduce", 2) == 1.0
    assert bus_factor("allgather", 4) == 3.0  # a part's size each rank gives: it receives three of them
    assert bus_factor("sendrecv", 8) == 1.0 and bus_factor("get", 8) == 1.0


def test_the_fit_recovers_latency_bandwidth_and_noise_of_made_up_times():
    """time = α + bytes/β, the part on the wire spread by a gamma factor of mean 1 and CV 0.1."""
    rng = np.random.default_rng(0)
    alpha, beta, cv = 20e-6, 1.25e8, 0.1
    sizes = [8 * 4 ** k for k in range(10)]
    times = [alpha + n / beta * rng.gamma(1 / cv ** 2, cv ** 2, size=400) for n in sizes]
    fit = fit_link(INTER, "sendrecv", sizes, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.2) and fit.bandwidth == pytest.approx(beta, rel=0.02)
    assert fit.noise == pytest.approx(cv, rel=0.2)
    assert fit_link(INTER, "sendrecv", sizes[:1], times[:1]) is None  # one size: no slope
    assert fit_link(INTER, "sendrecv", sizes[:3], [[1.0]] * 3) is None  # flat: no bandwidth


def test_simulate_takes_the_links_between_nodes_where_the_sweep_crossed_them():
    inner = LinkFit(INTRA, 1e-6, 1e10, 0.0, 5, "sendrecv")
    outer = LinkFit(INTER, 2e-5, 1e8, 0.1, 5, "sendrecv")
    assert chosen_fit([inner, outer]) is outer and chosen_fit([inner]) is inner
    with pytest.raises(UsageError, match="fitted no link"):
        chosen_fit([])


def sweep_of(times_of, sizes=tuple(8 * 8 ** k for k in range(6)), iters=20, ranks=3):
    """A sweep's table and fits as ``hpcbench comm`` prints them, from times made up per (op, bytes)."""
    from types import SimpleNamespace

    from hpcbench.results.commfile import CommFile
    from hpcbench.runtime.mpi.commsweep import tabulated, text

    measured = [SimpleNamespace(op=op, nbytes=n, peer=peer, link=link, seconds=tuple(times_of(op, n, iters)))
                for op, peer, link in (("allreduce", -1, "all"), ("sendrecv", 1, INTRA)) for n in sizes]
    rows, fits = tabulated(measured, ranks)
    data = CommFile({"world_size": ranks, "iters": iters, "warmup": 2, "mpi_library_version": "MPICH 5"}, rows,
                    np.array([m.seconds for m in measured]), fits)
    return text(data, 1)


def test_the_table_is_headed_with_units_and_shows_the_median_the_fit_uses():
    rng = np.random.default_rng(1)

    def times(op, n, iters):  # 2 µs and 1 GB/s, spread by 5%
        return (2e-6 + n / 1e9) * rng.gamma(400, 1 / 400, size=iters)

    table, warnings = sweep_of(times)
    lines = table.splitlines()
    assert lines[0].startswith("# hpcbench comm: 3 ranks on 1 node(s), 20 iterations after 2 warm-up ones; MPICH 5")
    head = next(line for line in lines if "size (B)" in line)
    assert head.startswith("#") and head.split() == ["#", "size", "(B)", "count", "(elements)", "p50", "(µs)", "p90",
                                                   "(µs)", "min", "(µs)", "algbw", "busbw"]
    assert any("p50 (the median) is what the fit uses" in line for line in lines if line.startswith("#"))
    rows = [line.split() for line in lines if line and not line.startswith("#") and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [8 * 8 ** k for k in range(6)] * 2 and [int(r[1]) for r in rows[:2]] == [2, 16]
    for r in rows:  # bandwidths in the unit that keeps them readable: never 0.00x
        algbw, unit = float(r[5]), r[6]
        assert unit in ("B/s", "KB/s", "MB/s", "GB/s") and 1 <= algbw < 1000, r
    sendrecv = rows[6:]
    p50 = [float(r[2]) for r in sendrecv]
    assert p50[0] == pytest.approx(2.008, rel=0.1) and p50[-1] == pytest.approx(264.1, rel=0.1)
    scale = {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9}
    for r in sendrecv:  # algbw: the size over the median (p50); busbw of one rank to another: the same
        assert float(r[5]) * scale[r[6]] == pytest.approx(int(r[0]) / (float(r[2]) * 1e-6), rel=0.02)
        assert r[5:7] == r[7:9]
    assert "→ simulate --network alpha=" in table and warnings == []


@pytest.mark.parametrize("spoil, says", [
    (lambda n, t: t * (10 if n == 4096 else 1), "4096 B's median 252% off the line"),  # one size far off
    (lambda n, t: t * np.random.default_rng(n).gamma(1, 1, size=len(t)), "p10-p90 spread 309% of p50"),  # unquiet
])
def test_a_fit_too_far_off_its_sizes_or_too_spread_to_trust_is_one_warning_and_no_ready_value(spoil, says):
    def times(op, n, iters):
        return spoil(n, np.full(iters, 2e-6 + n / 1e9))

    table, warnings = sweep_of(times)
    assert "simulate --network" not in table and "intra-node links (sendrecv, 6 sizes): α" in table
    (line,) = warnings
    assert line.startswith("hpcbench: warning: the intra-node fit is doubtful (") and says in line
    assert line.endswith("): sweep again, more --iters") and len(line) <= 140, line


@requires_mpi
@pytest.mark.both
@pytest.mark.timeout(300)
def test_a_real_sweep_is_written_read_back_and_taken_by_simulate_and_calibrate(tmp_path):
    out = tmp_path / "comm.h5"
    proc = ok(mpirun(3, "comm", "-b", "8", "-e", "256K", "-f", "8", "--iters", "8", "--warmup", "2",
                     "--out", str(out)))
    data = read_comm(out)
    sizes = [8, 64, 512, 4096, 32768, 262144]
    ops = [(r.op, r.bytes) for r in data.rows]
    for op in ("allreduce", "allgather", "sendrecv", "get", "put", "accumulate"):
        assert [n for o, n in ops if o == op] == sizes, op
    assert [n for o, n in ops if o == "fetch_add"] == [8]
    assert data.seconds.shape == (len(data.rows), 8) and np.isfinite(data.seconds).all()
    assert data.attrs["world_size"] == 3 and len(data.attrs["hosts"].split(",")) == 3
    for r, seconds in zip(data.rows, data.seconds):
        assert r.time_s == pytest.approx(seconds.mean()) and r.min_s == pytest.approx(seconds.min())
        assert r.algbw == pytest.approx(r.bytes / r.time_s)
        assert r.busbw == pytest.approx(r.algbw * {"allreduce": 4 / 3, "allgather": 2}.get(r.op, 1))
        collective = r.op in ("allreduce", "allgather")
        assert r.link == ("all" if collective else "intra-node") and r.peer == (-1 if collective else 1)
    (fit,) = data.fits
    assert fit.link == "intra-node" and fit.op == "sendrecv" and fit.sizes == len(sizes)
    assert fit.alpha_s >= 0 and fit.bandwidth > 0 and fit.noise >= 0
    assert "busbw" in proc.stdout and "p50 (µs)" in proc.stdout
    assert f"simulate --network {fit.network()}" in proc.stdout or "fit is doubtful" in proc.stderr

    code, _, err = cli("simulate", "--algo", "asgd", "--workers", "2", "--steps", "5", "--numerics", "off",
                       "--network", str(out), "--out", str(tmp_path / "sim.h5"))
    assert code == 0, err
    sim = read_run(tmp_path / "sim.h5").simulation
    assert (sim["alpha_s"], sim["bandwidth"], sim["noise"]) == (fit.alpha_s, fit.bandwidth, fit.noise)

    real = tmp_path / "real.h5"
    ok(mpirun(3, "run", "--algo", "asgd", "--steps", "10", "--model", "payload", "--out", str(real)))
    code, text, err = cli("calibrate", str(real), "--network", str(out))
    assert code == 0 and "--network alpha=" in text, err
    fitted = calibrate(read_run(real), link=fit)  # the sweep's network, not one fitted from the run
    assert (fitted["alpha_s"], fitted["bandwidth"], fitted["noise"]) == (fit.alpha_s, fit.bandwidth, fit.noise)

    code, _, err = cli("comm", "--out", str(out), "-e", "64")  # one rank, outside mpiexec
    assert code == 2 and "needs 2 ranks or more" in err


@requires_mpi
@pytest.mark.timeout(120)
def test_a_sweep_refuses_on_every_rank_to_replace_a_file_without_overwrite(tmp_path):
    out = tmp_path / "comm.h5"
    out.write_bytes(b"x")
    proc = mpirun(3, "comm", "-e", "64", "--out", str(out))
    assert proc.returncode != 0 and proc.stderr.count("exists; choose another --out or add --overwrite") == 1
    assert out.read_bytes() == b"x"


def a_sweep_file(path):
    """A sweep's file as ``hpcbench comm`` writes it (two sizes of sendrecv, its fit)."""
    from hpcbench.results.commfile import CommFile, CommRow, write_comm

    rows = [CommRow("sendrecv", INTRA, 1, n, t, t * 0.9, t * 1.2, n / t, n / t) for n, t in ((8, 2e-6), (8192, 1e-5))]
    fit = LinkFit(INTRA, 1e-6, 1e9, 0.05, 2, "sendrecv")
    write_comm(path, CommFile({"world_size": 2, "iters": 3, "warmup": 1, "mpi_library_version": "MPICH 5",
                               "hosts": "a,a"}, rows, np.array([[r.time_s] * 3 for r in rows]), [fit]))
    return path


@pytest.mark.parametrize("where, value, says", [
    ("rows/time_s", -1e-6, "rows/time_s = -1e-06 at row 0"),
    ("rows/algbw", np.inf, "rows/algbw = inf at row 0"),
    ("rows/min_s", 1.0, "are not in order"),
    ("rows/peer", 7, "rows/peer = 7 at row 0: not a rank of the world"),
    ("seconds", np.nan, "seconds is not one row of finite times"),
    ("fits/bandwidth", 0.0, "fits at row 0"),
    ("fits/noise", -0.5, "fits at row 0"),
])
def test_a_sweep_file_with_an_impossible_value_is_refused_in_one_line_by_whatever_reads_it(tmp_path, capsys, where,
                                                                                          value, says):
    import h5py

    from hpcbench.cli import main
    from hpcbench.results.commfile import read_comm

    path = a_sweep_file(tmp_path / "net.h5")
    assert read_comm(path).fits[0].bandwidth == 1e9  # the file as written reads back
    with h5py.File(path, "r+") as f:
        group, _, column = where.partition("/")
        if column:
            f[group][column][0] = value
        else:
            f[group][0, 0] = value
    with pytest.raises(UsageError, match=f"net.h5 is invalid: .*{re.escape(says)}"):
        read_comm(path)
    assert main(["simulate", "--algo", "asgd", "--workers", "2", "--steps", "2", "--network", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is invalid" in err and "Traceback" not in err, err
