"""What the command line prints for people and for other programs: `list` shows what each option
resolves to, names families as the README does, and output cut short by a closed pipe ends quietly."""
from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.options.sim import SimConfig
from hpcbench.report.strict_json import json_safe
from hpcbench.results.store import read_run
from hpcbench.telemetry.progress_line import ProgressLine

from conftest import cli

README = Path(__file__).resolve().parents[1] / "README.md"


def option_table(text: str) -> dict[str, tuple[str, str]]:
    """`list`'s option tables (header "option  default  valid" or "key  default  valid") as
    {option: (default text, valid range text)}, cut at the columns the dashes under the header mark."""
    rows: dict[str, tuple[str, str]] = {}
    lines, spans = text.splitlines(), None
    for above, line in zip([""] + lines, lines):
        if re.match(r"^(option|key)\s+default\s+valid$", above) and line.startswith("-"):
            spans = [m.span() for m in re.finditer(r"-+", line)]
        elif not line.strip():
            spans = None
        elif spans and not re.match(r"^(option|key)\s", line):
            name, default, valid = (line[a:b if i < 2 else None].strip() for i, (a, b) in enumerate(spans))
            rows[name] = (default, valid)
    return rows


def option_rows(text: str) -> dict[str, str]:
    return {name: default for name, (default, _) in option_table(text).items()}


def test_list_shows_what_a_placeholder_default_resolves_to():
    code, out, _ = cli("list")
    assert code == 0
    rows = option_rows(out)
    assert rows["ga-asgd.history"] == rows["dana-ga.history"] == "2·workers + 4"
    assert rows["easgd.alpha"] == rows["easgd-sync.alpha"] == "0.9 / workers"
    assert "100" in rows["steps"] and "epochs" in rows["steps"]
    assert rows["stragglers"] == "none" and rows["fault"] == "none"
    assert rows["allreduce.overlap"] == "true" and rows["nesterov"] == "false"  # as --set and TOML spell them
    assert rows["gossip.variant"] == "pull"
    assert "Slurm" in rows["time_limit_s"] and "7 days" in rows["time_limit_s"]
    for text in rows.values():
        assert not re.search(r"None|\w+\(|^''$|^\(\)$", text), text


def test_list_shows_every_simulator_option():
    _, out, _ = cli("list")
    rows = option_rows(out)
    for f in dataclasses.fields(SimConfig):
        assert f"sim.{f.name}" in rows, f.name
    assert rows["sim.allreduce"] == "rabenseifner" and rows["sim.progress"] == "async"
    assert "parameter" in rows["sim.apply_s"] and "model's size" in rows["sim.message_params"]


def test_list_shows_every_numeric_options_range_as_refusals_name_it():
    _, out, _ = cli("list")
    valid = {name: text for name, (_, text) in option_table(out).items()}
    assert valid["local-sgd.period"] == ">= 1 local steps" and valid["easgd.alpha"] == "in (0, 1)"
    assert valid["ga-asgd.history"] == "between 0 and 8192 versions" and valid["momentum"] == "in [0, 1)"
    assert valid["sim.bandwidth"] == ">= 1 bytes/s" and valid["sim.compute_mean_s"] == "in (0, 1,000,000] seconds"
    assert valid["teacher.samples"] == "between 1 and 10,000,000 samples"
    assert valid["out"] == ""  # any path


def test_list_shows_every_text_options_choices_and_every_switch():
    """Each option that takes one of several words shows them all, as the refusal of another word names them."""
    import dataclasses

    from hpcbench.algorithms.compressors import COMPRESSORS
    from hpcbench.options import option_tables
    from hpcbench.ranges import choices_of

    _, out, _ = cli("list")
    valid = {name: text for name, (_, text) in option_table(out).items()}
    assert valid["allreduce.compress"] == valid["local-sgd.compress"] == " | ".join(COMPRESSORS.names())
    assert valid["gossip.variant"] == "pull | push" and valid["lr_scaling"] == "none | linear | sqrt"
    assert valid["nesterov"] == valid["allreduce.error_feedback"] == "true | false"
    for name, table in option_tables().items():
        for f in dataclasses.fields(table.options):
            choices = choices_of(f)
            if choices is None:
                continue
            assert valid[f"{name}.{f.name}"] == " | ".join(choices)
            if table.algorithm:
                code, _, err = cli("run", "--dry-run", "--workers", "2", "--algo", name,
                                   "--set", f"{name}.{f.name}=nonsense")
                assert code == 2 and f"unknown {name}.{f.name} 'nonsense'; valid: {', '.join(choices)}" in err


def test_list_names_each_family_as_the_readme_does():
    families = {}
    for line in README.read_text(encoding="utf-8").splitlines():  # the table under "| family | algorithms |"
        match = re.match(r"^\| (synchronous|parameter server|asynchronous decentralized) \| (`.*)\|$", line)
        if match:
            for name in re.findall(r"`([a-z-]+)`", match.group(2)):
                families[name] = match.group(1)
    _, out, _ = cli("list")
    listed = {}
    for line in out.split("\n\n")[1].splitlines():  # the "Algorithms" table
        match = re.match(r"^([a-z-]+)\s{2,}([a-z ]+?)\s{2,}\d+\s", line)
        if match:
            listed[match.group(1)] = match.group(2)
    from hpcbench.algorithms import ALGORITHMS
    assert list(listed) == ALGORITHMS.names() and listed == families


def test_every_text_that_counts_or_lists_the_algorithms_agrees_with_the_registry():
    """README, CONTRIBUTING, docs/ and ``list``: a count of algorithms, a list of the valid ones in an error
    line, and the demo's number of runs follow the registry (a new algorithm makes stale text fail here)."""
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.launch.local_study import DEMO_VARIANTS

    names = ALGORITHMS.names()
    _, listed, _ = cli("list")
    texts = {path.name: path.read_text(encoding="utf-8")
             for path in [README, README.parent / "CONTRIBUTING.md", *sorted((README.parent / "docs").glob("*.md"))]}
    texts["hpcbench list"] = listed
    for where, text in texts.items():
        for count in re.findall(r"\b(\d+) algorithms\b", text):
            assert int(count) == len(names), f"{where} says {count} algorithms; the registry has {len(names)}"
        for valid in re.findall(r"unknown algorithm '[^']*'; valid: ([a-z, -]+)", text):
            assert valid.split(", ") == names, f"{where} lists {valid}"
    demo = re.search(r"The demo runs every algorithm at two world sizes.*?for its (\d+) runs", texts["README.md"], re.S)
    assert demo is not None and int(demo.group(1)) == 2 * (len(names) + len(DEMO_VARIANTS))


@pytest.mark.slow  # hpcbench in a process of its own
@pytest.mark.parametrize("args", [["list"], ["run", "--dry-run", "--algo", "asgd", "--workers", "2"]])
def test_output_into_a_closed_pipe_ends_quietly(args):
    # The reader is gone before hpcbench writes (as with `| head -1` on a long output).
    proc = subprocess.Popen([sys.executable, "-m", "hpcbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 141) and err == "", (proc.returncode, err)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    where = tmp_path_factory.mktemp("runs")
    for workers in (2, 4):
        code, _, err = cli("simulate", "--numerics", "off", "--steps", "20", "--algo", "asgd", "--workers",
                           str(workers), "--out", str(where / f"asgd-{workers}.h5"))
        assert code == 0, err
    return where


def test_the_json_report_is_strict_json_and_every_column_has_its_unit(two_runs):
    code, out, err = cli("report", str(two_runs), "--format", "json")
    assert code == 0, err
    document = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    units = document["units"]
    for table in ("runs", "scaling"):
        for column in document[table][0]:
            assert column in units or column in ("algorithm", "mode", "workers", "nodes", "path"), column
    columns = set(document["runs"][0]) | set(document["scaling"][0])
    assert set(units) <= columns, set(units) - columns
    # numerics off: no accuracy, so never at the target: null, and units say what null means
    assert document["runs"][0]["time_to_target_s"] is None and "null" in units["time_to_target_s"]


def test_non_finite_numbers_become_null_for_json():
    assert json_safe({"a": [float("inf"), float("-inf"), float("nan"), 1.5], "b": (2, "x")}) == \
        {"a": [None, None, None, 1.5], "b": [2, "x"]}


def test_a_run_without_a_model_says_so_instead_of_printing_nan(tmp_path):
    code, out, err = cli("simulate", "--numerics", "off", "--steps", "20", "--algo", "easgd", "--workers", "3",
                         "--out", str(tmp_path / "t.h5"))
    assert code == 0, err
    assert "nan" not in out and "warm-up" not in out and "timing only (no model trained)" in out
    assert "s of virtual time = " in out and "s of wall-clock time]" in out  # the two clocks are named
    progress = io.StringIO()
    line = ProgressLine("simulating easgd, 3 workers", 1000, progress, mode="plain", every_s=0.0,
                        clock=iter([0.0, 2.0]).__next__, rate_unit="samples/s simulated (wall clock)")
    line.update(500, float("nan"), float("nan"))
    assert progress.getvalue() == ("[2 s] simulating easgd, 3 workers: 500/1000 samples (50%), "
                                   "250 samples/s simulated (wall clock), ETA 2 s\n")


def test_a_study_diffed_against_itself_is_unchanged_everywhere(two_runs):
    code, out, err = cli("diff", str(two_runs), str(two_runs))
    assert code == 0, err
    points = [line.split() for line in out.splitlines() if line.startswith("asgd")]
    assert len(points) == 2 and all("same" in p and "changed" not in p for p in points), out
    assert "configuration: identical" in out


def test_a_run_that_lost_workers_says_so_on_its_result_line(tmp_path):
    code, out, err = cli("simulate", "--numerics", "off", "--steps", "40", "--algo", "asgd", "--workers", "4",
                         "--set", "fault=kill:2@0.05", "--out", str(tmp_path / "lost.h5"))
    assert code == 0, err
    rec = read_run(tmp_path / "lost.h5")
    assert int(rec.summary["workers_lost"]) == 1
    recovery_ms = 1000 * rec.tables["failures"]["recovery_s"][0]  # the one failure's, as the file has it
    shown = f"{recovery_ms:.2g}" if recovery_ms < 10 else f"{recovery_ms:.0f}"  # 0.88 ms, 8.1 ms, 27 ms, 123 ms
    assert out.startswith(f"asgd (sim, 4 workers, 1 of 4 lost (recovery {shown} ms)): "), out
    code, out, err = cli("simulate", "--numerics", "off", "--steps", "40", "--algo", "asgd", "--workers", "4",
                         "--out", str(tmp_path / "whole.h5"))
    assert code == 0 and out.startswith("asgd (sim, 4 workers): "), out


def test_a_reference_naming_an_unknown_algorithm_is_refused_with_the_valid_names(two_runs, tmp_path):
    ref = tmp_path / "ref.toml"
    ref.write_text("[asdg.2]\nsamples_per_s = [1, 1e9]\n")
    code, out, err = cli("check", str(two_runs), "--reference", str(ref))
    assert code == 2 and out == ""
    assert "asdg" in err and "asgd" in err and "ga-asgd" in err and len(err.strip().splitlines()) == 1, err


def test_hpcbench_max_steps_caps_every_run_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "3")
    code, out, err = cli("simulate", "--numerics", "off", "--epochs", "5", "--algo", "asgd", "--workers", "2",
                         "--out", str(tmp_path / "capped.h5"))
    assert code == 0, err
    config = read_run(tmp_path / "capped.h5").attrs["config"]
    assert config["steps_per_worker"] == 3 and config["max_steps"] == 3
    assert "capped at 3 steps per worker by max_steps" in out
    code, _, err = cli("simulate", "--numerics", "off", "--steps", "8", "--algo", "asgd", "--workers", "2",
                       "--set", "max_steps=5", "--out", str(tmp_path / "set.h5"))  # --set beats the environment
    assert code == 0 and read_run(tmp_path / "set.h5").attrs["config"]["steps_per_worker"] == 5
    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "20")  # a cap the run never reaches is not said to have cut it
    code, out, err = cli("simulate", "--numerics", "off", "--steps", "10", "--algo", "asgd", "--workers", "2",
                         "--out", str(tmp_path / "under.h5"))
    assert code == 0 and read_run(tmp_path / "under.h5").attrs["config"]["steps_per_worker"] == 10, err
    assert "capped" not in out and "smoke test" not in out, out
    code, out, err = cli("simulate", "--numerics", "off", "--epochs", "0.5", "--algo", "asgd", "--workers", "2",
                         "--out", str(tmp_path / "epochs.h5"))  # 0.5 epochs of digits: 12 steps, under the cap
    assert code == 0 and read_run(tmp_path / "epochs.h5").attrs["config"]["steps_per_worker"] == 12, err
    assert "capped" not in out, out
    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "a few")
    code, out, err = cli("simulate", "--algo", "asgd", "--out", str(tmp_path / "never.h5"))
    assert code == 2 and err == "hpcbench: error: HPCBENCH_MAX_STEPS must be a whole number of steps per worker " \
                                "(0: no cap), got 'a few'\n"
    assert not (tmp_path / "never.h5").exists()


@pytest.mark.parametrize("command, then", [
    ("demo", "the demo starts over when run again"),
    ("tune", "tune run again keeps the finished runs"),
])
def test_ctrl_c_says_what_running_the_command_again_does(monkeypatch, command, then):
    import importlib

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(f"hpcbench.commands.{command}"), "run", interrupted)
    argv = {"demo": ["demo"], "tune": ["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.1", "--out-dir", "x"]}
    code, _, err = cli(*argv[command])
    assert code == 130 and err == f"hpcbench: stopped by Ctrl-C during {command}; {then}\n"


def test_run_started_without_a_launcher_names_mpiexec_with_the_command_as_given(monkeypatch):
    """The line gives the command that works pasted as it is: the README's launcher, then the user's own
    arguments (quoted where the shell would split them), with ranks enough for the algorithm."""
    import shlex

    from hpcbench.launch.local import RANK_VARS, SIZE_VARS

    for var in {*RANK_VARS, *SIZE_VARS, "SLURM_STEP_ID"}:
        monkeypatch.delenv(var, raising=False)
    given = ["run", "--algo", "ga-asgd", "--model", "payload", "--steps", "5", "--set", "fault=kill:2@1 "]
    code, out, err = cli(*given)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    launch = "mpiexec -n 5 python -m mpi4py -m hpcbench"  # the README's own run command
    assert launch + " run --algo" in readme
    assert code == 2 and out == "" and err.startswith(f"hpcbench: error: run needs MPI ranks: {launch} "), err
    command = err.removeprefix(f"hpcbench: error: run needs MPI ranks: {launch} ").removesuffix(
        " (or simulate, which needs none)\n")
    assert shlex.split(command) == given, err
    code, out, err = cli("run", "--algo", "sgp")  # as many ranks as the algorithm needs, or more
    assert code == 2 and "mpiexec -n 5 python -m mpi4py -m hpcbench run --algo sgp (or simulate" in err


def test_a_file_that_is_not_hdf5_says_so_in_words(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# hpcbench\n")
    code, _, err = cli("report", str(readme))
    assert code == 2 and err == (f"hpcbench: error: cannot read result file {str(readme)!r}: not HDF5 (hpcbench "
                                 "writes one HDF5 file per run, NAME.h5)\n")


# What a newcomer trips on: the plot extra, report -o, the flags of a subcommand, misspelt names.
PLOT_HINT = 'plots need matplotlib: pip install -e ".[plot]" in the clone (or pip install matplotlib)'


def test_report_plot_without_matplotlib_fails_before_any_report_text(two_runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    code, out, err = cli("report", str(two_runs), "--plot", str(tmp_path / "plots"))
    assert code == 2 and out == "" and err == f"hpcbench: error: {PLOT_HINT}\n"
    assert not (tmp_path / "plots").exists()


def test_the_html_page_without_matplotlib_names_the_plot_extra_first(two_runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = cli("report", str(two_runs), "--format", "html")
    assert code == 0 and err == f"report: {PLOT_HINT} (the page has no plots)\n"
    assert f"No plots: {PLOT_HINT}".replace('"', "&quot;") in out


def test_the_readme_names_the_plot_extra_in_the_quick_start():
    quick_start = README.read_text(encoding="utf-8").split("## Quick start")[1].split("\n## ")[0]
    assert 'pip install -e ".[plot]"' in quick_start


def made_at(text: str) -> str:
    """``text`` with the html page's time of making left out."""
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", "TIME", text)


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_report_o_writes_the_report_to_a_file_as_trace_does(two_runs, tmp_path, fmt):
    _, shown, _ = cli("report", str(two_runs), "--format", fmt)
    for flag in ("-o", "--output"):
        target = tmp_path / f"report-{flag}.{fmt}"
        code, out, err = cli("report", str(two_runs), "--format", fmt, flag, str(target))
        assert code == 0, err
        assert made_at(target.read_text(encoding="utf-8")) == made_at(shown)
        assert out == f"report of 2 runs -> {target}\n"


def test_report_o_that_cannot_be_written_is_one_line(two_runs, tmp_path):
    (tmp_path / "a-file").write_text("")
    code, out, err = cli("report", str(two_runs), "-o", str(tmp_path / "a-file" / "r.txt"))
    assert code == 2 and out == "" and err == (f"hpcbench: error: cannot write the report to "
                                               f"{str(tmp_path / 'a-file' / 'r.txt')!r}: Not a directory\n")


@pytest.mark.parametrize("argv, said", [
    (["report", "x.h5", "--bogus"], "hpcbench report: error: unrecognized arguments: --bogus "
                                    "(see hpcbench report --help)\n"),
    (["run", "--algo", "asgd", "--set", "momentum", "0.9"],
     "hpcbench run: error: unrecognized arguments: 0.9; did you mean --set momentum=0.9? (see hpcbench run --help)\n"),
    (["simulate", "--algo", "asgd", "--set", "ga-asgd.beta", "0.5", "--set", "lr=0.1"],
     "hpcbench simulate: error: unrecognized arguments: 0.5; did you mean --set ga-asgd.beta=0.5? "
     "(see hpcbench simulate --help)\n"),
])
def test_an_unknown_argument_points_at_the_subcommands_help(capsys, argv, said):
    from hpcbench.cli import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    assert stop.value.code == 2 and captured.out == "" and captured.err == said


@pytest.mark.parametrize("argv, said", [
    (["--algo", "ga_asgd"], "unknown algorithm 'ga_asgd'; valid: "),
    (["--algo", "asgd", "--model", "cnn_small"], "unknown model 'cnn_small'; valid: "),
    (["--algo", "asgd", "--dataset", "fashion_mnist"], "unknown dataset 'fashion_mnist'; valid: "),
    (["--algo", "gossip", "--set", "gossip.variant=pul"], "unknown gossip.variant 'pul'; valid: pull, push"),
])
def test_a_misspelt_name_gets_the_closest_valid_one(argv, said):
    code, out, err = cli("run", "--dry-run", "--workers", "2", *argv)
    name = said.split("'")[1]
    close = {"ga_asgd": "ga-asgd", "cnn_small": "cnn-small", "fashion_mnist": "fashion-mnist", "pul": "pull"}[name]
    assert code == 2 and out == "" and err.startswith(f"hpcbench: error: {said}")
    assert err.endswith(f"; did you mean {close!r}?\n") and err.count("\n") == 1


def test_a_name_nothing_is_close_to_gets_no_guess():
    from hpcbench.errors import one_of

    assert str(one_of("algorithm", "nope", ["allreduce", "asgd"])) == "unknown algorithm 'nope'; valid: allreduce, asgd"
    assert str(one_of("format", "HTML", ["text", "html"])).endswith("; did you mean 'html'?")
    assert str(one_of("seed", 3, ["1", "2"])) == "unknown seed 3; valid: 1, 2"
