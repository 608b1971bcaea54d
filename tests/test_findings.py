"""docs/findings.md and the README's findings lines are written from the studies' verdict.json
(``hpcbench findings``), and a study says when the code its files were made with has changed."""
import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbench.cli import main
from hpcbench.reproduce import findings, made_with

ROOT = Path(__file__).resolve().parent.parent


def test_the_findings_and_the_readme_say_what_the_committed_verdicts_say(capsys, monkeypatch):
    """Fails when docs/findings.md or the README's findings lines differ from docs/reproduce/*/verdict.json."""
    monkeypatch.chdir(ROOT)
    assert main(["findings", "--check"]) == 0, capsys.readouterr().err


# What the code here makes: a study made with it is up to date.
CURRENT = made_with.record([("0123456789abcdef", False)], ("asgd", "allreduce", "sgp", "osgp"), simulated=True)


def verdict(accuracy=(0.70, 0.71, 0.72), outcome="holds"):
    return {"study": "sgp", "preset": "full", "headline": f"SGP within about a point of all-reduce: {outcome}",
            "command": "hpcbench reproduce sgp --out-dir results/reproduce/sgp", "runs": 12, "kept": 2,
            "elapsed_s": 600.0, "jobs": 2, "protocol": {"dataset": "fashion-mnist", "model": "cnn-tiny"},
            "made_with": CURRENT,
            "claims": [{"key": "sgp-accuracy", "short": "SGP within about a point of all-reduce",
                        "quote": "within about one point", "source": "Assran et al.", "paper": "1.2 points",
                        "test": "SGP minus all-reduce above -1.5 pts", "modelled": False,
                        "arms": {"shared": {"outcome": outcome, "summary": outcome, "evidence": [
                            {"where": "n=32", "outcome": outcome, "numbers": "sgp 71.0%, allreduce 71.2%"}]}}}],
            "arms": [{"name": "shared", "cells": [
                {"algo": a, "workers": 32, "variant": "10 GbE", "accuracy": list(accuracy),
                 "time_to_target": [1.0, 1.0, 1.0], "wall": [10.0, 11.0, 12.0]} for a in ("allreduce", "sgp")]}]}


def write_study(root, v, reading=None, name="sgp"):
    (root / name).mkdir(parents=True, exist_ok=True)
    text = json.dumps(v)
    (root / name / "verdict.json").write_text(text)
    if reading is not None:
        (root / name / "reading.md").write_text(findings.READING.format(findings.digest(text)) + "\n" + reading)
    return text


def test_findings_are_written_from_the_verdicts_and_follow_them(tmp_path, capsys):
    studies, out, readme = tmp_path / "studies", tmp_path / "findings.md", tmp_path / "README.md"
    write_study(studies, verdict(), reading="The ratio is bounded by the ring's cost.")
    readme.write_text(f"# x\n\n{findings.README_START}\n- stale line\n{findings.README_END}\n\nmore\n")
    args = ["findings", "--studies", str(studies), "--out", str(out), "--readme", str(readme)]
    assert main([*args, "--check"]) == 1  # nothing written yet: both differ
    assert "differs from what the verdicts" in capsys.readouterr().err and not out.exists()
    assert main(args) == 0
    text = out.read_text()
    assert ("- **SGP (Assran et al.)**, FULL study on Fashion-MNIST, cnn-tiny: SGP within about a point of "
            "all-reduce: holds") in text
    assert "`hpcbench reproduce sgp --out-dir results/reproduce/sgp`: 12 runs (10 run in 10.0 min, 2 at a time; " \
           "2 kept from an earlier invocation). Made with commit 0123456789." in text
    # The cells' table: mean over seeds ± half the 95% t interval (71.0 ± 2.5 for 70, 71, 72), and the time.
    assert "| shared | 10 GbE    | 32        | 71.0 ± 2.5 (11 s) | 71.0 ± 2.5 (11 s) |" in text
    assert "The ratio is bounded by the ring's cost." in text
    assert readme.read_text() == (f"# x\n\n{findings.README_START}\nFindings (real images):\n\n"
                                  "- **SGP (Assran et al.)**, FULL study on Fashion-MNIST, cnn-tiny: SGP within about "
                                  f"a point of all-reduce: holds\n{findings.README_END}\n\nmore\n")
    assert main([*args, "--check"]) == 0
    # The study run again: new numbers, new outcome; the reading written for the old run is left out, said so.
    write_study(studies, verdict(accuracy=(0.60, 0.61, 0.62), outcome="does not hold"))
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    text = out.read_text()
    assert "61.0 ± 2.5" in text and "71.0 ± 2.5" not in text and "does not hold" in readme.read_text()
    assert "The ratio is bounded" not in text and "the study was run again" in text
    # Made with code that has changed since: the findings and the README say so where its verdict is quoted.
    old = {**verdict(), "made_with": {**CURRENT, "files": {**CURRENT["files"], "algorithms/sgp.py": "0" * 12}}}
    write_study(studies, old)
    assert main([*args, "--check"]) == 1 and main(args) == 0
    stale = ("(**STALE**: 1 file of the code its runs were made with changed since: algorithms: algorithms/sgp.py; "
             "run it again before quoting it)")
    assert f"- **SGP (Assran et al.)**, FULL study on Fashion-MNIST, cnn-tiny {stale}: SGP within" in readme.read_text()
    assert f"**In short** (FULL study {stale}): " in out.read_text()


def test_the_findings_come_first_and_the_teacher_task_studies_are_checks_of_the_machinery(tmp_path, capsys):
    """A verdict that names no data set (made before the protocol named one) ran the teacher task: it is listed
    after the findings, under the checks of the machinery, whatever its directory's name sorts as."""
    studies, out = tmp_path / "studies", tmp_path / "findings.md"
    teacher = {k: v for k, v in verdict(outcome="does not hold").items() if k != "protocol"}
    write_study(studies, teacher, name="a-teacher-sgp")
    write_study(studies, verdict(), name="sgp")
    assert main(["findings", "--studies", str(studies), "--out", str(out), "--readme", str(tmp_path / "none")]) == 0
    text = out.read_text()
    found, checks = text.index("Findings (real images):"), text.index("Checks of the machinery")
    real = text.index("FULL study on Fashion-MNIST, cnn-tiny: SGP within about a point of all-reduce: holds")
    synthetic = text.index("FULL study on the teacher task, mlp: SGP within about a point of all-reduce: does not hold")
    assert found < real < checks < synthetic
    assert text.index("## SGP (Assran et al.) on Fashion-MNIST, cnn-tiny") < \
        text.index("## a-teacher-sgp on the teacher task, mlp")
    capsys.readouterr()


def test_a_resilience_study_is_written_with_its_claims_and_each_cells_interval_over_seeds(tmp_path):
    pairs = [{"seed": k, "goodput": 1000.0, "goodput_failing": 900.0 + 10 * k, "accuracy": 0.70,
              "accuracy_failing": 0.70 - 0.01 * k} for k in range(3)]
    v = {**verdict(), "study": "resilience", "failures_per_run": 2,
         "cells": [{"algo": "gossip", "workers": 8, "seeds": pairs}]}
    text = "\n".join(findings.study_section("resilience", v, None))
    assert "| claim" in text and "SGP within about a point" in text  # the claims, as every study's
    # kept 0.90, 0.91, 0.92: 0.910 ± t(2)·0.01/√3 = 0.025; lost 0, 1, 2 pts: +1.00 ± 2.48
    assert "| 8         | 0.910 ± 0.025 | +1.00 ± 2.48  |" in text, text


def test_a_readings_links_reach_from_findings_md_what_they_reach_from_the_reading():
    text = "[r](report.md), [m](../../measurements.md#x), [w](https://example.org/a), [h](#top)"
    assert findings.relinked(text, "sgp") == ("[r](reproduce/sgp/report.md), [m](measurements.md#x), "
                                              "[w](https://example.org/a), [h](#top)")


def test_a_verdict_that_is_not_one_is_one_line(tmp_path, capsys):
    (tmp_path / "s" / "jin").mkdir(parents=True)
    (tmp_path / "s" / "jin" / "verdict.json").write_text("{not json")
    assert main(["findings", "--studies", str(tmp_path / "s"), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hpcbench: error: ") and "jin/verdict.json: not a verdict (JSONDecodeError" in err
    assert len(err.splitlines()) == 1
    assert main(["findings", "--studies", str(tmp_path / "none"), "--check"]) == 2
    assert "is not a directory of studies" in capsys.readouterr().err


@pytest.mark.slow  # 60 verdict files: 4 s
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["arms", "claims", "cells", "name", "accuracy", "evidence", "headline",
                                         "workers", "algo", "variant", "short", "family", "outcome", "wall",
                                         "seeds", "goodput", "goodput_failing", "accuracy_failing"]),
                        inner, max_size=4), max_leaves=12),
       st.sampled_from(["arms", "claims", "headline", "command", "made_with", "cells", "failures_per_run"]))
def test_whatever_a_verdict_file_holds_findings_writes_it_or_refuses_in_one_line(tmp_path, capsys, junk, key):
    """A verdict.json edited by hand: its section is written, or the file is named in one line (exit 2);
    never a traceback."""
    v = verdict()
    v[key] = junk
    root = tmp_path / "studies"
    write_study(root, v)
    code = main(["findings", "--studies", str(root), "--out", str(tmp_path / "f.md"), "--readme", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code in (0, 2)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and "sgp/verdict.json: not a verdict" in err


def test_a_study_says_which_code_changed_since_its_files_were_made(tmp_path, capsys):
    record = made_with.record([("abc", False), ("abc", False), ("def", True)])
    assert record["commits"] == ["abc", "def"] and record["dirty"] is True
    assert set(record["versions"]) == {"simulator", "transport", "algorithms", "workload", "measurement"}
    assert made_with.stale(record) == []
    old = copy.deepcopy(record)
    old["files"]["runtime/sim/engine.py"] = "0" * 12
    old["files"]["algorithms/gone.py"] = "1" * 12
    del old["files"]["algorithms/ps.py"]
    assert made_with.stale(old) == ["algorithms: algorithms/gone.py (removed)", "algorithms: algorithms/ps.py (new)",
                                    "simulator: runtime/sim/engine.py"]
    assert made_with.stale({}) == ["no record of the code its files were made with"]
    # A verdict written again by newer code over runs it kept keeps the digests those runs were made with.
    assert made_with.stale(made_with.record([("abc", False)], before=old)) == ["simulator: runtime/sim/engine.py"]
    # The command says it per study, and exits 1 where a study should run again.
    v = verdict()
    v["made_with"] = old
    write_study(tmp_path, v)
    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 1
    line = capsys.readouterr().out.strip()
    # (of the algorithms, only SGP's own files count: gone.py was none of them)
    assert line == ("sgp: run it again: 2 file(s) changed since: algorithms: algorithms/ps.py (new), "
                    "simulator: runtime/sim/engine.py")
    v["made_with"] = record
    write_study(tmp_path, v)
    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 0
    assert capsys.readouterr().out.strip() == "sgp: up to date with the code here"


def test_a_recheck_that_found_its_runs_the_same_stands_for_the_code_it_was_made_with(tmp_path, capsys):
    """A study made with older code is STALE; a recheck of its runs (recheck.json) made with the code here
    that found them the same makes it current again, and findings.md says so; one that found a run otherwise,
    or one of other runs (the study made again since), leaves it STALE."""
    old = copy.deepcopy(CURRENT)
    old["files"]["runtime/sim/engine.py"] = "0" * 12
    old["versions"] = made_with.versions(old["files"])
    v = verdict()
    v["made_with"] = old
    write_study(tmp_path, v)
    runs = [{"cell": "sgp n=32 10 GbE", "seed": 0, "was": {}, "now": {}, "same": True}]

    def recheck(same=True, of=old["versions"]):
        (tmp_path / "sgp" / "recheck.json").write_text(json.dumps(
            {"study": "sgp", "of": of, "same": same, "runs": [{**runs[0], "same": same}],
             "made_with": made_with.record([("0123456789abcdef", False)], simulated=True)}))

    def findings_md():
        assert main(["findings", "--studies", str(tmp_path), "--out", str(tmp_path / "f.md"),
                     "--readme", str(tmp_path / "none.md")]) == 0
        return (tmp_path / "f.md").read_text()

    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 1
    recheck()
    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 0
    text = findings_md()
    assert "**STALE**" not in text and ("Rechecked with commit 0123456789: 1 run (one per algorithm) made again "
                                        "came out the same to the last digit.") in text
    recheck(same=False)
    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 1
    text = findings_md()
    assert "**STALE**" in text and "found 1 of 1 run made again came out otherwise" in text
    recheck(of={"simulator": "another"})  # a recheck of the runs of an earlier invocation of the study
    assert main(["findings", "--studies", str(tmp_path), "--stale"]) == 1
    assert "Rechecked" not in findings_md()
    capsys.readouterr()


def test_a_study_ages_only_with_the_algorithm_files_its_runs_are_made_of(tmp_path):
    """Gap-Aware runs parameter servers: a change to the decentralized coordinator does not age it, a
    change to the parameter server does; Jin (gossip, EASGD) ages with both. A record made before
    records were scoped (every algorithm's files) is judged the same way."""
    import shutil

    import hpcbench
    from hpcbench.reproduce.studies import STUDIES

    root = tmp_path / "hpcbench"
    shutil.copytree(Path(hpcbench.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    ga, jin = STUDIES["gap-aware"].algorithms(), STUDIES["jin"].algorithms()
    assert ga == ("asgd", "sa-asgd", "ga-asgd", "dana-ga") and jin == ("asgd", "allreduce", "easgd", "gossip")
    scoped, everything = made_with.record([], ga, root), made_with.record([], None, root)
    assert "algorithms/ps.py" in scoped["files"] and "algorithms/rules.py" in scoped["files"]
    assert "algorithms/decentral.py" not in scoped["files"] and "algorithms/decentral.py" in everything["files"]
    (root / "algorithms" / "decentral.py").write_text("# changed\n", encoding="utf-8")
    assert made_with.stale(scoped, ga, root) == made_with.stale(everything, ga, root) == []
    assert made_with.stale(everything, jin, root) == ["algorithms: algorithms/decentral.py"]
    (root / "algorithms" / "rules.py").write_text("# changed\n", encoding="utf-8")
    assert made_with.stale(scoped, ga, root) == ["algorithms: algorithms/rules.py"]


def test_a_simulated_study_does_not_age_with_the_mpi_transport_and_a_real_run_study_does(tmp_path):
    """The simulator does not run comm/'s channels: a change there ages the real-run study only; a change
    to the runtime the simulator shares (its result-file record) ages both. A record made before
    records were scoped (every transport file) is judged the same way."""
    import shutil

    import hpcbench

    root = tmp_path / "hpcbench"
    shutil.copytree(Path(hpcbench.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    simulated, real = made_with.record([], None, root, simulated=True), made_with.record([], None, root)
    assert "comm/channels.py" in real["files"] and "comm/channels.py" not in simulated["files"]
    assert "runtime/record.py" in simulated["files"] and "runtime/sim/engine.py" in simulated["files"]
    (root / "comm" / "channels.py").write_text("# changed\n", encoding="utf-8")
    assert made_with.stale(simulated, None, root, simulated=True) == []
    assert made_with.stale(real, None, root, simulated=True) == []  # (an unscoped record of a simulated study)
    assert made_with.stale(real, None, root) == ["transport: comm/channels.py"]
    (root / "runtime" / "record.py").write_text("# changed\n", encoding="utf-8")
    assert made_with.stale(simulated, None, root, simulated=True) == ["transport: runtime/record.py"]


@pytest.mark.parametrize("part, path", [("simulator", "runtime/sim/engine.py"), ("transport", "comm/mpi.py"),
                                        ("transport", "runtime/driver.py"), ("algorithms", "algorithms/rules.py"),
                                        ("measurement", "results/store.py"), (None, "report/html.py"),
                                        (None, "reproduce/verdicts.py")])
def test_the_parts_a_result_file_depends_on(part, path):
    assert made_with.part_of(path) == part


NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text):
    """The numbers a text states, without their signs and units (1,234 and 1234 alike)."""
    return {m.replace(",", "") for m in NUMBER.findall(text)}


@pytest.mark.parametrize("study", sorted(p.parent.name for p in (ROOT / "docs" / "reproduce").glob("*/reading.md")))
def test_every_number_in_a_reading_is_one_its_verdict_states(study):
    """A reading is the only prose written by hand about a study: each number in it must be one its
    verdict.json states (the same digits), so a reading cannot carry a number the files do not hold."""
    root = ROOT / "docs" / "reproduce" / study
    verdict = (root / "verdict.json").read_text(encoding="utf-8")
    reading, why = findings.reading_for((root / "reading.md").read_text(encoding="utf-8"), verdict)
    if reading is None:
        pytest.skip(f"{study}: its reading is of an earlier verdict and is left out of the findings ({why})")
    missing = sorted(numbers(reading) - numbers(verdict), key=lambda x: (len(x), x))
    assert not missing, f"{study}/reading.md states numbers its verdict.json does not: {', '.join(missing)}"


def test_the_time_of_a_study_counts_only_what_was_recorded_and_says_what_was_not():
    """A study resumed after an invocation that was stopped before it wrote a verdict: only the runs of
    invocations that wrote one are timed, and the text says how many were not."""
    v = {"runs": 342, "kept": 217, "jobs": 2, "invocations": [{"elapsed_s": 3774.0, "ran": 125, "jobs": 2}]}
    assert findings.minutes(v) == ("342 runs (125 of them in 62.9 min, 2 at a time; the other 217 were made by an "
                                   "invocation stopped before it wrote a verdict, whose time was not recorded)")
    v["invocations"].insert(0, {"elapsed_s": 6000.0, "ran": 217, "jobs": 2})
    assert findings.minutes(v) == "342 runs in 162.9 min, 2 at a time, over 2 invocations"
