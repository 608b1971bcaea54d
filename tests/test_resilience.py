"""hpcbench reproduce resilience: the failure schedule, the verdict per family against hand-made cells,
and the study at toy size, its report checked against the files it wrote."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbench.config import Faults
from hpcbench.reproduce.resilience import FAMILIES, Pair, ResilienceCell, judge, schedule
from hpcbench.reproduce.verdicts import FAILS, HOLDS, NOT_MODELLED, UNCLEAR
from hpcbench.results.store import read_run

from conftest import cli, have_ulfm, requires_mpi, requires_ulfm


def test_a_schedule_kills_distinct_workers_at_equal_intervals_and_leaves_one():
    spec = schedule(8, 12.0, seed=3, count=2)
    kills = [part.split(":")[1].split("@") for part in spec.split(",")]
    ranks, times = [int(r) for r, _ in kills], [float(t) for _, t in kills]
    assert len(set(ranks)) == 2 and all(1 <= r <= 8 for r in ranks) and times == [4.0, 8.0]
    assert schedule(8, 12.0, seed=3) == spec  # from the seed alone
    assert len(schedule(2, 6.0, seed=0, count=5).split(",")) == 1  # never all of them: one of two


def cell(algo, workers, kept, dropped=0.0, lost=2):
    """A cell whose seed s kept ``kept[s]`` of its goodput (a number: the same for three seeds) and lost
    ``dropped`` accuracy; ``lost``: the workers each failing run lost (a list: per seed)."""
    kept = [kept] * 3 if isinstance(kept, float) else kept
    lost = [lost] * len(kept) if isinstance(lost, int) else lost
    return ResilienceCell(algo, workers, tuple(Pair(s, 1000.0, 1000.0 * k, 0.7, 0.7 - dropped, 0.01, w, 64)
                                               for s, (k, w) in enumerate(zip(kept, lost))))


def outcomes(cells, modelled=False):
    return {cv.claim.key: cv for cv in judge(cells, modelled)}


def test_each_family_gets_a_verdict_per_claim_from_the_interval_over_seeds_at_every_size():
    cells = [cell("allreduce", n, [0.60, 0.61, 0.62]) for n in (8, 32)]
    cells += [cell("ga-asgd", n, [0.80, 0.82, 0.81]) for n in (8, 32)]  # more kept, seed by seed, everywhere
    cells += [cell("easgd", 8, [0.80, 0.80, 0.80]), cell("easgd", 32, [0.55, 0.56, 0.57])]  # less at 32
    cells += [cell("gossip", 8, [0.59, 0.63, 0.61]), cell("gossip", 32, 0.9)]  # -0.01, +0.02, -0.01 at 8: straddles
    got = outcomes(cells)
    assert set(got) == {f"{a}-{c}" for a in FAMILIES for c in ("goodput", "accuracy")}
    assert got["ga-asgd-goodput"].outcome == HOLDS
    easgd = got["easgd-goodput"]
    assert easgd.outcome == FAILS and easgd.summary() == f"{FAILS} (holds at n=8; not at n=32)"
    assert got["gossip-goodput"].outcome == UNCLEAR
    assert [e.outcome for e in got["gossip-goodput"].evidence] == [UNCLEAR, HOLDS]
    assert all(got[f"{a}-accuracy"].outcome == HOLDS for a in FAMILIES)  # none lost any
    # in the simulator, goodput is the cost model's: a claim it does not bear out is "not reproduced by the model"
    assert outcomes(cells, modelled=True)["easgd-goodput"].outcome == NOT_MODELLED


def test_more_accuracy_lost_than_all_reduce_beyond_half_a_point_does_not_hold_and_within_it_holds():
    worse = outcomes([cell("allreduce", 8, 0.6), cell("ga-asgd", 8, 0.8, dropped=0.05)])["ga-asgd-accuracy"]
    assert worse.outcome == FAILS and "n=8" in worse.evidence[0].where and "-5.0" in worse.evidence[0].numbers
    close = outcomes([cell("allreduce", 8, 0.6), cell("ga-asgd", 8, 0.8, dropped=0.004)])["ga-asgd-accuracy"]
    assert close.outcome == HOLDS


def test_a_seed_whose_run_ended_before_its_failures_is_left_out_and_fewer_than_three_decide_nothing():
    cells = [cell("allreduce", 8, 0.6), cell("ga-asgd", 8, 0.99, lost=[2, 2, 1])]
    [row] = outcomes(cells)["ga-asgd-goodput"].evidence
    assert row.outcome == UNCLEAR and row.interval.n == 2 and "1 seed left out" in row.numbers
    five = [cell("allreduce", 8, [0.6] * 5), cell("easgd", 8, [0.8] * 5, lost=[2, 0, 2, 2, 2])]
    assert outcomes(five)["easgd-goodput"].outcome == HOLDS  # four seeds are left
    none = outcomes([cell("allreduce", 8, 0.6, lost=0), cell("easgd", 8, 0.8)])["easgd-goodput"]
    assert none.outcome == UNCLEAR and "ended before them" in none.evidence[0].numbers


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.1, 1.0), min_size=3, max_size=6), st.floats(0.001, 0.5), st.permutations(range(6)))
def test_a_constant_lead_holds_and_a_constant_lag_does_not_whatever_the_seeds_and_their_order(base, lead, order):
    ar = cell("allreduce", 8, base)
    seeds = [i for i in order if i < len(base)]
    ahead = ResilienceCell("gossip", 8, tuple(Pair(s, 1000.0, 1000.0 * (base[s] + lead), 0.7, 0.7, 0.01, 2, 64)
                                              for s in seeds))
    behind = ResilienceCell("gossip", 8, tuple(Pair(s, 1000.0, 1000.0 * (base[s] - lead), 0.7, 0.7, 0.01, 2, 64)
                                               for s in seeds))
    assert outcomes([ar, ahead])["gossip-goodput"].outcome == HOLDS
    assert outcomes([ar, behind])["gossip-goodput"].outcome == FAILS


def test_a_real_run_that_ended_before_its_failures_runs_again_over_its_own_duration(tmp_path, monkeypatch):
    """Real runs only: the run with failures that lost fewer workers than its schedule kills is run once
    more, killed at equal intervals of its own duration; one that lost them all is left as it is."""
    from types import SimpleNamespace

    from hpcbench.reproduce import runner
    from hpcbench.reproduce.protocol import Recipe
    from hpcbench.reproduce.studies import study
    from hpcbench.tuning.grid import Setting

    s, best = study("resilience"), Setting(0.05, 0.9)
    recipe = Recipe(best, {0.9: best})
    failing = {(a, 4, 0): runner.planned(s, "toy", tmp_path, (a, 4, "failures"), best, 0, "mpi",
                                         ("--set", f"fault={schedule(4, 3.0, 0)}")) for a in ("gossip", "easgd")}
    for r in failing.values():
        r.job.path.write_bytes(b"a result file")
    lost = {"gossip": 0, "easgd": 2}  # gossip's run (2.4 s: faster than the 3 s one) ended before its failures
    monkeypatch.setattr(runner, "read_run", lambda path: SimpleNamespace(summary={
        "workers_lost": lost[path.name.split("-")[0]], "wall_s": 2.4}))
    ran = []
    monkeypatch.setattr(runner, "run_jobs", lambda jobs, *a: ran.extend(jobs) or {j.path: "" for j in jobs})
    outcome = {r.job.path: "" for r in failing.values()}
    again = runner.again(s, "toy", tmp_path, recipe, failing, outcome, 60.0)
    assert list(again) == [("gossip", 4, 0)] and [j.path for j in ran] == [failing[("gossip", 4, 0)].job.path]
    assert not ran[0].path.exists() and failing[("easgd", 4, 0)].job.path.exists()  # the short run's file goes
    assert ran[0].cfg.fault == Faults.parse(schedule(4, 2.4, 0)) != failing[("gossip", 4, 0)].job.cfg.fault


def test_the_toy_study_reports_what_its_files_say(tmp_path):
    out = tmp_path / "res"
    code, text, err = cli("reproduce", "resilience", "--preset", "toy", "--out-dir", str(out))
    assert code == 0, err
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["study"] == "resilience" and verdict["failures_per_run"] == 2
    assert [c["key"] for c in verdict["claims"]] == [f"{a}-{c}" for a in FAMILIES for c in ("goodput", "accuracy")]
    for c in verdict["claims"]:  # one seed: no interval, so nothing is decided
        [arm] = c["arms"].values()
        assert arm["outcome"] == UNCLEAR and all(e["seeds"] == 1 for e in arm["evidence"])
    assert verdict["headline"].count("inconclusive") == len(verdict["claims"])
    assert verdict["made_with"]["commits"] and verdict["invocations"][0]["ran"] == verdict["runs"]
    assert "TOY size" in (out / "report.md").read_text()
    for c in verdict["cells"]:  # every number from the files, read back here
        calm = read_run(out / "runs" / f"{c['algo']}-n{c['workers']}-lr0.05-m0.9-s0.h5").summary
        failing = read_run(out / "runs" / f"{c['algo']}-n{c['workers']}-lr0.05-m0.9-s0-failures.h5")
        assert failing.attrs["status"] == "ok"
        lost = failing.tables["failures"]["worker"]
        assert len(lost) == min(2, c["workers"] - 1) == failing.summary["workers_lost"]
        assert c["goodput_kept"] == pytest.approx(failing.summary["samples_per_s"] / calm["samples_per_s"])
        assert c["accuracy_lost"] == pytest.approx(calm["final_accuracy"] - failing.summary["final_accuracy"])
        deaths = failing.tables["failures"]["t_death"]
        assert np.all(deaths < calm["wall_s"])  # within the failure-free run's duration


@requires_mpi
def test_real_runs_need_an_mpi_that_outlives_a_failed_worker(tmp_path):
    if have_ulfm():
        pytest.skip("this MPI outlives failed workers (the ULFM test below runs the study)")
    code, _, err = cli("reproduce", "resilience", "--preset", "toy", "--mode", "mpi", "--out-dir", str(tmp_path))
    assert code == 2 and err.strip().count("\n") == 0 and "Open MPI with ULFM" in err, err


@requires_ulfm
@pytest.mark.timeout(600)
def test_the_toy_study_with_real_runs_under_ulfm(tmp_path):
    out = tmp_path / "res"
    code, text, err = cli("reproduce", "resilience", "--preset", "toy", "--mode", "mpi", "--max-ranks", "3",
                          "--out-dir", str(out))
    assert code == 0, err
    verdict = json.loads((out / "verdict.json").read_text())
    assert [c["workers"] for c in verdict["cells"]] == [2] * 4
    for c in verdict["cells"]:
        failing = read_run(out / "runs" / f"{c['algo']}-n2-lr0.05-m0.9-s0-failures.h5")
        assert failing.provenance["fault_tolerance"] == "ulfm" and failing.summary["workers_lost"] == 1
