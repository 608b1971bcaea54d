"""hpcbench reproduce resilience: the failure schedule, the verdict per family against hand-made cells,
and the study at toy size, its report checked against the files it wrote."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbench.config import Faults
from hpcbench.reproduce.resilience import (
    FAMILIES,
    SCENARIOS,
    Pair,
    ResilienceCell,
    capacity_time,
    judge,
    node_mtbf,
    schedule,
)
from hpcbench.reproduce.verdicts import FAILS, HOLDS, NOT_MEANINGFUL, NOT_MODELLED, UNCLEAR
from hpcbench.results.store import read_run

from conftest import cli, have_ulfm, requires_mpi, requires_ulfm


def kills(spec):
    return sorted((float(t), int(r)) for r, t in (part.split(":")[1].split("@") for part in spec.split(","))) \
        if spec else []


def test_each_scenario_draws_its_schedule_from_the_seed_and_never_kills_the_last_worker():
    early = kills(schedule("early", 8, 20.0, seed=3))
    assert len(early) == 1 and early[0][0] == pytest.approx(1.0) and 1 <= early[0][1] <= 8
    burst = kills(schedule("burst", 8, 20.0, seed=3))
    assert [t for t, _ in burst] == [10.0, 10.0] and len({r for _, r in burst}) == 2  # a quarter of 8, at once
    assert schedule("burst", 8, 20.0, seed=3) == schedule("burst", 8, 20.0, seed=3)  # from the seed alone
    assert len(kills(schedule("burst", 2, 20.0, seed=0))) == 1 and kills(schedule("early", 1, 20.0, seed=0)) == []
    assert len(kills(schedule("mtbf", 4, 100.0, seed=1, mtbf=1e-3))) == 3  # all would fail: one is left
    assert schedule("mtbf", 4, 100.0, seed=1, mtbf=1e12) == ""  # none within the run


def test_the_node_mtbf_gives_the_expected_number_of_failures_and_more_with_more_node_time():
    """Over many seeds the mean number of failures is n·T/M (each worker fails at an exponential time with mean M,
    so within T with probability 1 − exp(−T/M))."""
    mtbf = node_mtbf(8, 10.0)
    assert mtbf == pytest.approx(8 * 10.0 / 2)  # all-reduce at the smallest size expects 2
    for n, seconds in ((8, 10.0), (32, 5.0), (128, 2.5)):
        counts = [len(kills(schedule("mtbf", n, seconds, seed, mtbf))) for seed in range(400)]
        expected = n * (1 - np.exp(-seconds / mtbf))
        assert np.mean(counts) == pytest.approx(expected, rel=0.12)


def test_capacity_time_is_a_naive_step_loop_of_the_survivors():
    """Against an independent reference: the team's work done in small time steps, a worker fewer from each
    death on, until it reaches the failure-free run's work."""
    def naive(seconds, n, deaths, dt=1e-4):
        deaths = sorted(deaths)[:n - 1]  # the last worker is never killed
        t = done = 0.0
        while done < seconds * n:
            done += dt * (n - sum(d <= t for d in deaths))
            t += dt
        return t

    for seconds, n, deaths in ((10.0, 4, [2.0]), (10.0, 8, [1.0, 1.0]), (5.0, 4, [1.0, 3.0, 4.0]), (3.0, 2, [9.0]),
                               (6.0, 4, []), (4.0, 3, [1.0, 2.0, 3.0])):
        assert capacity_time(seconds, n, deaths) == pytest.approx(naive(seconds, n, deaths), abs=1e-3)
    assert capacity_time(10.0, 4, [2.0]) == pytest.approx(2.0 + 8.0 * 4 / 3)


def split_cell(algo, workers, overhead, scenario="burst", dropped=0.0):
    """Seeds whose failing run took capacity time plus ``overhead[s]`` of the failure-free 10 s, one death at 5 s."""
    ideal = capacity_time(10.0, workers, [5.0])
    return ResilienceCell(algo, workers, tuple(Pair(s, 1000.0, 1000.0 * 10.0 / (ideal + 10.0 * o), 0.7, 0.7 - dropped,
                                                    0.01, 1, 0, 10.0, ideal + 10.0 * o, (5.0,), 1, workers)
                                               for s, o in enumerate(overhead)), scenario)


def test_a_family_loses_less_when_its_time_beyond_capacity_is_smaller_by_the_margin_in_each_scenario():
    cells = [split_cell("allreduce", 8, [0.05, 0.06, 0.07]), split_cell("ga-asgd", 8, [0.00, 0.01, 0.01]),
             split_cell("easgd", 8, [0.05, 0.06, 0.07]), split_cell("gossip", 8, [0.045, 0.055, 0.065])]
    cells += [split_cell(c.algo, 8, [p.split.overhead for p in c.pairs], "early") for c in cells]
    got = {cv.claim.key: cv for cv in judge(cells, modelled=True)}
    assert got["ga-asgd-overhead"].outcome == HOLDS
    assert [e.where for e in got["ga-asgd-overhead"].evidence] == ["burst n=8", "early n=8"]
    assert got["easgd-overhead"].outcome == NOT_MODELLED  # the same time lost: not less, as the model has it
    assert got["gossip-overhead"].outcome == NOT_MODELLED  # 0.5% less: short of the 1% margin
    row = got["ga-asgd-overhead"].evidence[0].numbers
    assert row.startswith("beyond capacity: ga-asgd +0.7%, allreduce +6.0% of the failure-free run (capacity +7.1%)")


def test_a_run_that_drops_the_work_it_lost_is_not_cheaper_for_it():
    """Two runs whose failing run took the same time, one of which kept only 90% of the budget's samples (it did
    not redo the lost work): at its own rate the budget takes it a ninth longer, and that is overhead."""
    ideal = capacity_time(10.0, 8, [5.0])
    redone = Pair(0, 1000.0, 10000.0 / ideal, 0.7, 0.7, 0.01, 1, 0, 10.0, ideal, (5.0,), 1, 8)
    dropped = Pair(0, 1000.0, 9000.0 / ideal, 0.7, 0.7, 0.01, 1, 1000, 10.0, ideal, (5.0,), 1, 8)
    assert redone.split.overhead == pytest.approx(0.0, abs=1e-12)
    assert dropped.split.overhead == pytest.approx(ideal / 0.9 / 10.0 - ideal / 10.0)
    assert dropped.split.lost_work == pytest.approx(0.1)
    # A seed whose MTBF draw met no failure costs nothing, and counts (it is one of the MTBF's outcomes).
    calm = Pair(1, 1000.0, 1000.0, 0.7, 0.7, float("nan"), 0, 0, 10.0, 10.0, (), 0, 8)
    assert calm.split.overhead == 0.0 and calm.split.capacity == 0.0
    assert 1 in ResilienceCell("gossip", 8, (calm,), "mtbf").whole()


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
    assert easgd.outcome == FAILS and easgd.summary().startswith(
        f"{FAILS} (1 of 2 rows of the paper's setting hold; n=32: {FAILS}, difference -0.050 [")
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
@given(st.lists(st.floats(0.1, 1.0), min_size=3, max_size=6), st.floats(0.0101, 0.5), st.permutations(range(6)))
def test_a_constant_lead_holds_and_a_constant_lag_does_not_whatever_the_seeds_and_their_order(base, lead, order):
    """A lead beyond the claim's margin (1% of goodput) holds; a lag, or a lead short of it, does not."""
    ar = cell("allreduce", 8, base)
    seeds = [i for i in order if i < len(base)]
    ahead = ResilienceCell("gossip", 8, tuple(Pair(s, 1000.0, 1000.0 * (base[s] + lead), 0.7, 0.7, 0.01, 2, 64)
                                              for s in seeds))
    behind = ResilienceCell("gossip", 8, tuple(Pair(s, 1000.0, 1000.0 * (base[s] - lead), 0.7, 0.7, 0.01, 2, 64)
                                               for s in seeds))
    assert outcomes([ar, ahead])["gossip-goodput"].outcome == HOLDS
    assert outcomes([ar, behind])["gossip-goodput"].outcome == FAILS
    short = ResilienceCell("gossip", 8, tuple(Pair(s, 1000.0, 1000.0 * (base[s] + 0.0099), 0.7, 0.7, 0.01, 2, 64)
                                              for s in seeds))
    assert outcomes([ar, short])["gossip-goodput"].outcome == FAILS


def test_a_real_run_that_ended_before_its_failures_runs_again_over_its_own_duration(tmp_path, monkeypatch):
    """Real runs only: the run with failures that lost fewer workers than its schedule kills is run once
    more, killed at equal intervals of its own duration; one that lost them all is left as it is."""
    from types import SimpleNamespace

    from hpcbench.reproduce import resilience_run as runner
    from hpcbench.reproduce.protocol import Recipe
    from hpcbench.reproduce.studies import study
    from hpcbench.tuning.grid import Setting

    s, best = study("resilience"), Setting(0.05, 0.9)
    recipe = Recipe(best, {0.9: best})
    failing = {(a, 4, 0, "burst"): runner.with_failures(s, "toy", tmp_path, recipe, (a, 4, 0, "burst"), 3.0, "mpi",
                                                        10.0) for a in ("gossip", "easgd")}
    for r in failing.values():
        r.job.path.write_bytes(b"a result file")
    lost = {"gossip": 0, "easgd": 1}  # gossip's run (2.4 s: faster than the 3 s one) ended before its failures
    monkeypatch.setattr(runner, "read_run", lambda path: SimpleNamespace(summary={
        "workers_lost": lost[path.name.split("-")[0]], "wall_s": 2.4}))
    ran = []
    monkeypatch.setattr(runner, "run_jobs", lambda jobs, *a: ran.extend(jobs) or {j.path: "" for j in jobs})
    outcome = {r.job.path: "" for r in failing.values()}
    again = runner.again(s, "toy", tmp_path, recipe, failing, outcome, 60.0, 10.0)
    assert list(again) == [("gossip", 4, 0, "burst")]
    assert [j.path for j in ran] == [failing[("gossip", 4, 0, "burst")].job.path]
    assert not ran[0].path.exists() and failing[("easgd", 4, 0, "burst")].job.path.exists()  # the short run's goes
    assert ran[0].cfg.fault == Faults.parse(schedule("burst", 4, 2.4, 0)) != \
        failing[("gossip", 4, 0, "burst")].job.cfg.fault


@pytest.mark.slow  # a study at toy size: about a minute
def test_the_toy_study_reports_what_its_files_say(tmp_path):
    out = tmp_path / "res"
    code, text, err = cli("reproduce", "resilience", "--preset", "toy", "--out-dir", str(out))
    assert code == 0, err
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["study"] == "resilience" and verdict["scenarios"] == sorted(SCENARIOS)
    assert [c["key"] for c in verdict["claims"]] == [f"{a}-{c}" for a in FAMILIES for c in ("overhead", "accuracy")]
    for c in verdict["claims"]:  # one seed: no interval, so nothing is decided
        [arm] = c["arms"].values()
        if arm["outcome"] == NOT_MEANINGFUL:  # the toy budget may not train: accuracy lost then says nothing
            assert c["key"].endswith("-accuracy")
            assert "it did not come close to it" in arm["evidence"][0]["numbers"]
            continue
        assert arm["outcome"] == UNCLEAR and all(e["seeds"] == 1 for e in arm["evidence"])
    assert verdict["headline"].count("inconclusive") + verdict["headline"].count(NOT_MEANINGFUL) == \
        len(verdict["claims"])
    assert verdict["made_with"]["commits"] and verdict["invocations"][0]["ran"] == verdict["runs"]
    assert "TOY size" in (out / "report.md").read_text() and verdict["node_mtbf_s"] > 0
    for c in verdict["cells"]:  # every number from the files, read back here
        calm = read_run(out / "runs" / f"{c['algo']}-n{c['workers']}-lr0.05-m0.9-s0.h5").summary
        [seed] = c["seeds"]
        if seed["scheduled"] == 0:  # the MTBF drew no failure within this run: it is its own failure-free run
            assert c["scenario"] == "mtbf" and seed["lost"] == 0 and seed["wall_failing"] == calm["wall_s"]
            continue
        failing = read_run(out / "runs" / f"{c['algo']}-n{c['workers']}-lr0.05-m0.9-s0-failures{c['scenario']}.h5")
        assert failing.attrs["status"] == "ok"
        lost = failing.tables["failures"]["worker"]
        assert len(lost) == seed["scheduled"] == failing.summary["workers_lost"] == seed["lost"]
        assert c["goodput_kept"] == pytest.approx(failing.summary["samples_per_s"] / calm["samples_per_s"])
        assert c["accuracy_lost"] == pytest.approx(calm["final_accuracy"] - failing.summary["final_accuracy"])
        deaths = failing.tables["failures"]["t_death"]
        assert np.all(deaths < calm["wall_s"]) and seed["deaths"] == pytest.approx(sorted(deaths))
        # beyond capacity, from the files: the budget's samples at the failing run's goodput, less capacity's time
        ideal = capacity_time(calm["wall_s"], c["workers"], deaths)
        budget = calm["wall_s"] * calm["samples_per_s"] / failing.summary["samples_per_s"]
        assert Pair(**{**seed, "deaths": tuple(seed["deaths"])}).split.overhead == \
            pytest.approx((budget - ideal) / calm["wall_s"])
    # Judged again from its verdict.json alone: the same verdict.
    code, _, err = cli("reproduce", "resilience", "--rejudge", "--out-dir", str(out))
    again = json.loads((out / "verdict.json").read_text())
    assert code == 0, err
    assert (again["headline"], again["claims"], again["cells"]) == \
        (verdict["headline"], verdict["claims"], verdict["cells"])
    # Made again with the code here (--recheck): each family's run at the most workers without failures and
    # with its first scenario's, their schedule drawn again from the recorded failure-free duration: the same.
    code, _, err = cli("reproduce", "resilience", "--recheck", "--out-dir", str(out))
    recheck = json.loads((out / "recheck.json").read_text())
    assert code == 0 and recheck["same"], err
    assert [r["cell"] for r in recheck["runs"]] == [f"{a} n=4{v}" for a in ("allreduce", *FAMILIES)
                                                    for v in ("", " failures-burst")]
    burst = next(c for c in again["cells"] if (c["algo"], c["workers"], c["scenario"]) == ("easgd", 4, "burst"))
    assert recheck["runs"][5]["was"] == {"accuracy": burst["seeds"][0]["accuracy_failing"],
                                         "wall": burst["seeds"][0]["wall_failing"]}
    burst["seeds"][0]["wall_failing"] += 1.0  # a verdict its runs no longer give: the recheck says so
    (out / "verdict.json").write_text(json.dumps(again))
    code, text, _ = cli("reproduce", "resilience", "--recheck", "--out-dir", str(out))
    assert code == 1 and "easgd n=4 failures-burst, seed 0: DIFFERS" in text and "1 of 8 run(s) differ" in text


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
    assert [c["workers"] for c in verdict["cells"]] == [2] * 4 * len(SCENARIOS)
    for c in verdict["cells"]:
        [seed] = c["seeds"]
        if seed["scheduled"] == 0:  # the MTBF drew no failure within this run
            continue
        failing = read_run(out / "runs" / f"{c['algo']}-n2-lr0.05-m0.9-s0-failures{c['scenario']}.h5")
        assert failing.provenance["fault_tolerance"] == "ulfm" and failing.summary["workers_lost"] == 1
