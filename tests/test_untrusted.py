"""No value becomes code: a field of a generated job script that could end its line is refused in one
line, and a study's ``study.json`` is read as untrusted input (names from the registry, files inside the
study) before anything is written or submitted."""
from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbench.cli import main
from hpcbench.errors import UsageError
from hpcbench.slurm.jobs import Resources, log_file, run_job

INJECTED = "x\ntouch PWNED\n#"
SWEEP = ["sweep", "--algos", "asgd", "--nodes", "1", "--tasks-per-node", "3", "--mpi", "pmi2"]


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flags, names", [
    (["--partition", INJECTED], "--partition"),
    (["--account", INJECTED], "--account"),
    (["--mem", "4G\rtouch PWNED"], "--mem"),
    (["--constraint", "a\x00b"], "--constraint"),
    (["--constraint", "gpu\u2028touch PWNED"], "--constraint"),
    (["--sbatch-arg", f"--qos={INJECTED}"], "--sbatch-arg"),
    (["--setup", "module load x\ntouch PWNED"], "--setup"),
    (["--partition", "a b"], "--partition"),
    (["--account", 'x"y'], "--account"),
    (["--set", f"lr=0.1{INJECTED}"], ""),
])
def test_a_value_that_would_end_a_job_script_line_is_refused_before_anything_is_written(tmp_path, capsys, flags,
                                                                                        names):
    out = tmp_path / "study"
    assert main([*SWEEP, *flags, "--out-dir", str(out)]) == 2
    assert names in one_error(capsys)
    assert not list(out.glob("runs/*.sbatch")) and not (out / "submit.sh").exists()


# Unicode's format characters (category Cf): invisible, they reorder (bidi overrides and isolates) or hide
# (zero-width) the text around them, so a script would not read as it runs.
FORMAT_CHARACTERS = ["\u202e", "\u2066", "\u200b"]


@pytest.mark.parametrize("char", FORMAT_CHARACTERS)
@pytest.mark.parametrize("flags, names", [
    (["--partition", "gpu{c}"], "--partition"),
    (["--account", "{c}proj"], "--account"),
    (["--mem", "4G{c}"], "--mem"),
    (["--constraint", "a{c}b"], "--constraint"),
    (["--sbatch-arg=--qos=high{c}"], "--sbatch-arg"),
    (["--setup", "module load x{c}"], "--setup"),
    (["--dataset", "cifar10", "--data-dir", "/data/{c}cifar"], "a run option"),
    (["--out-dir", "OUT{c}x"], "--out-dir"),
])
def test_a_format_character_in_a_job_script_field_is_refused_naming_the_field(tmp_path, capsys, flags, names, char):
    out = tmp_path / "study"
    flags = [f.format(c=char).replace("OUT", str(tmp_path / "s")) for f in flags]
    argv = [*SWEEP, *flags] + ([] if "--out-dir" in flags else ["--out-dir", str(out)])
    assert main(argv) == 2
    line = one_error(capsys)
    assert names in line and f"format character {char!r}" in line and char not in line, line
    assert not list(tmp_path.glob("**/*.sbatch")) and not list(tmp_path.glob("**/submit.sh"))


@pytest.mark.parametrize("char", ["\u202e", "\x1b"])
def test_every_field_the_job_script_writer_takes_refuses_control_and_format_characters(char):
    kind = "format" if char == "\u202e" else "control"
    for field, flag in [("time", "--time"), ("partition", "--partition"), ("account", "--account"),
                        ("mpi", "--mpi"), ("mem", "--mem"), ("constraint", "--constraint")]:
        with pytest.raises(UsageError, match=f"^{flag} .* holds the {kind} character"):
            Resources(**{field: f"x{char}"})
    with pytest.raises(UsageError, match=f"^the job name .* holds the {kind} character"):
        run_job(f"hpcbench-asgd{char}-n1", 1, Resources(), ["run"], "/tmp/logs/x-%j.out")
    with pytest.raises(UsageError, match=f"^--out-dir .* holds the {kind} character"):
        run_job("job", 1, Resources(), ["run"], log_file(f"/tmp/s{char}", "x"))
    with pytest.raises(UsageError, match=f"^a run option .* holds the {kind} character"):
        run_job("job", 1, Resources(), ["run", "--out", f"/tmp/{char}.h5"], "/tmp/logs/x-%j.out")


@pytest.mark.parametrize("flag", ["--partition", "--account", "--mem", "--constraint", "--sbatch-arg", "--setup"])
def test_a_field_longer_than_any_job_script_takes_is_refused_in_one_short_line(tmp_path, capsys, flag):
    value = ("--qos=" if flag == "--sbatch-arg" else "") + "p" * 100_000
    out = tmp_path / "study"
    assert main([*SWEEP, f"{flag}={value}", "--out-dir", str(out)]) == 2
    line = one_error(capsys)
    assert flag in line and "100,0" in line and len(line) < 300, line
    assert not list(out.glob("runs/*.sbatch")) and not (out / "submit.sh").exists()


def test_an_out_dir_with_a_newline_is_refused_and_one_with_a_space_is_quoted(tmp_path, capsys):
    assert main([*SWEEP, "--out-dir", str(tmp_path / INJECTED)]) == 2
    line = one_error(capsys)
    assert "--out-dir" in line and "control character '\\n'" in line
    spaced = tmp_path / "my study"
    assert main([*SWEEP, "--out-dir", str(spaced)]) == 0
    script = (spaced / "runs" / "asgd-n1.sbatch").read_text()
    assert f'#SBATCH --output="{spaced}/logs/asgd-n1-%j.out"' in script


def stub_sbatch(directory, monkeypatch):
    """An ``sbatch`` on PATH that records each submission and hands out job ids."""
    log = directory / "submitted"
    stub = directory / "bin" / "sbatch"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho $$\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")
    return log


def written_study(tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*SWEEP, "--algos", "asgd,allreduce", "--out-dir", str(out)]) == 0
    capsys.readouterr()
    return out, json.loads((out / "study.json").read_text())


def crafted(manifest, change):
    change(manifest)
    return manifest


CRAFTED = {
    "an algorithm that climbs out of the study": (lambda m: m["points"][0].update(algo="../../elsewhere/escaped",
                                                                                   stem="../../elsewhere/escaped"),
                                                  "is not a plain name"),
    "an algorithm this hpcbench lacks": (lambda m: m["points"][0].update(algo="evil", stem="evil-n1"),
                                         "unknown algorithm 'evil'; valid: "),
    "a stem its point does not give": (lambda m: m["points"][0].update(stem="allreduce-n1"), "is named 'asgd-n1'"),
    "a newline in the partition": (lambda m: m["resources"].update(partition=INJECTED), "--partition"),
    "a newline in an sbatch option": (lambda m: m["resources"].update(sbatch_args=[f"--qos={INJECTED}"]),
                                      "--sbatch-arg"),
    "a newline in a setup line": (lambda m: m["resources"].update(setup=["true\ntouch PWNED"]), "--setup"),
    "a bidi override in the partition": (lambda m: m["resources"].update(partition="gpu\u202e"), "--partition"),
    "a bidi isolate in a run option": (lambda m: m["base_args"]["asgd"].append("\u2066x"), "a run option"),
    "a resource hpcbench does not know": (lambda m: m["resources"].update(command="touch PWNED"),
                                          "is not an object of"),
    "tasks as text": (lambda m: m["resources"].update(tasks_per_node="3; touch PWNED"), "--tasks-per-node"),
    "nodes as text": (lambda m: m["points"][0].update(nodes="1"), "not whole numbers"),
    "run options that are not text": (lambda m: m["base_args"].update(asgd=[1, 2]), "no list of run options"),
    "a newline in a run option": (lambda m: m["base_args"]["asgd"].append(INJECTED), "a run option"),
    "points that are not a list": (lambda m: m.update(points={"a": 1}), "no list of points"),
    "a point that is not an object": (lambda m: m["points"].append(3), "point 2 is not an object"),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_study_json_is_refused_by_resubmit_and_status_before_anything_runs(tmp_path, capsys, monkeypatch,
                                                                                     name):
    out, manifest = written_study(tmp_path, capsys)
    change, says = CRAFTED[name]
    (out / "study.json").write_text(json.dumps(crafted(manifest, change)))
    before = {p.name: p.read_text() for p in (out / "runs").iterdir()}
    submitted = stub_sbatch(tmp_path, monkeypatch)
    assert main(["sweep", "--resubmit-failed", str(out)]) == 2
    assert says in one_error(capsys)
    assert not submitted.exists() and not (tmp_path / "elsewhere").exists()
    assert {p.name: p.read_text() for p in (out / "runs").iterdir()} == before
    assert main(["status", str(out)]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"points": 3}', "[" * 100000 + "]" * 100000,
                                  '{"points": [{"stem": "a\\u0000", "algo": "asgd"}]}', "\xff\xfe"])
def test_a_study_json_that_is_not_a_record_is_one_line_for_status_and_resubmit(tmp_path, capsys, text):
    (tmp_path / "study.json").write_bytes(text.encode("latin-1") if text == "\xff\xfe" else text.encode())
    for command in (["status", str(tmp_path)], ["sweep", "--resubmit-failed", str(tmp_path)]):
        assert main(command) == 2
        assert "study.json" in one_error(capsys)


@pytest.mark.slow  # a stand-in for sbatch
def test_resubmit_of_a_sound_study_submits_each_point_and_names_the_setup_lines_it_runs(tmp_path, capsys,
                                                                                      monkeypatch):
    out, manifest = written_study(tmp_path, capsys)
    submitted = stub_sbatch(tmp_path, monkeypatch)
    assert main(["sweep", "--resubmit-failed", str(out)]) == 0
    said = capsys.readouterr().out
    assert "resubmitted 2 point(s): asgd-n1 allreduce-n1" in said
    assert len(submitted.read_text().splitlines()) == 3  # two runs and the report
    if manifest["resources"]["setup"]:
        assert "every job first runs these lines" in said


# Any text at all, as a field value: either refused in one line, or the script has exactly the lines it
# has for a plain value (nothing a value holds starts a line of its own).
@pytest.mark.slow  # bash -n on each script
@settings(max_examples=300, deadline=None, derandomize=True)
@given(value=st.text(min_size=1, max_size=12), field=st.sampled_from(["partition", "account", "mem", "constraint",
                                                                      "sbatch_args", "setup", "run_arg", "log"]))
def test_no_text_in_any_field_adds_a_line_to_a_job_script(value, field):
    def script(v):
        res = Resources(**({field: (f"--{v}",) if field == "sbatch_args" else (v,) if field == "setup" else v}
                           if field not in ("run_arg", "log") else {}))
        return run_job("job", 1, res, ["run", "--set", v] if field == "run_arg" else ["run"],
                       log_file(f"/tmp/{v}", "x") if field == "log" else "/tmp/logs/x-%j.out")
    try:
        text = script(value)
    except UsageError:
        return
    assert len(text.splitlines()) == len(script("plain").splitlines())
    if field != "setup":  # (a setup line is shell by design: ";" is the user's own syntax error)
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                             lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                                 st.sampled_from(["points", "stem", "algo", "nodes", "repeat", "resources",
                                                  "base_args", "local", "partition", "setup"]), inner, max_size=5),
                             max_leaves=12))
def test_any_json_as_study_json_is_a_status_or_one_line(tmp_path_factory, manifest):
    out = tmp_path_factory.mktemp("study")
    (out / "study.json").write_text(json.dumps(manifest))
    for argv in (["status", str(out)], ["sweep", "--resubmit-failed", str(out)]):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert code in (0, 2) and len(lines) <= 1 and "Traceback" not in err.getvalue(), (argv, manifest,
                                                                                          err.getvalue())
    assert sorted(p.name for p in out.iterdir()) in (["study.json"], ["logs", "report.sbatch", "runs", "study.json",
                                                                       "submit.sh"])
