"""Readers over files nobody planned: a real result file with one member or attribute replaced by
anything Hypothesis draws (any type, shape, value; NaN, infinities, negatives, huge declared sizes, links,
nesting) is either reported or refused in one line, by every reader, never a traceback; and the good
file beside it is still reported."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbench.cli import main

pytestmark = pytest.mark.timeout(300)
GOOD = Path(tempfile.mkdtemp(prefix="hpcbench-fuzz-")) / "good.h5"


def good_file() -> Path:
    if not GOOD.exists():
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["simulate", "--algo", "ga-asgd", "--workers", "2", "--steps", "6", "--set", "evals=3",
                         "--out", str(GOOD)]) == 0
        GOOD.with_suffix(".toml").write_text("[ga-asgd.2]\nsamples_per_s = [0, 1e12]\n")
    return GOOD


def members() -> list[str]:
    with h5py.File(good_file(), "r") as f:
        names: list[str] = []
        f.visit(names.append)
    return names


def attributes() -> list[tuple[str, str]]:
    with h5py.File(good_file(), "r") as f:
        found = [("/", k) for k in f.attrs]
        f.visititems(lambda name, obj: found.extend((name, k) for k in obj.attrs))
    return found


numbers = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1, 99, 255, 2**31]))
dtypes = st.sampled_from(["i1", "u1", "i4", "i8", "f4", "f8", "S3"])


@st.composite
def arrays(draw):
    dtype = draw(dtypes)
    shape = draw(st.sampled_from([(), (0,), (1,), (3,), (5,), (2, 3), (90,)]))
    size = int(np.prod(shape))
    if dtype == "S3":
        return np.array(draw(st.lists(st.binary(max_size=3), min_size=size, max_size=size)) or [b""],
                        dtype="S3").reshape(shape) if size else np.zeros(shape, "S3")
    values = draw(st.lists(numbers, min_size=size, max_size=size))
    with np.errstate(all="ignore"):
        data = np.array(values, dtype=np.float64 if dtype[0] == "f" else object).reshape(shape)
        try:
            return data.astype(dtype)
        except (OverflowError, ValueError, TypeError):
            return np.zeros(shape, dtype)


json_values = st.recursive(st.none() | st.booleans() | numbers | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=8)
attr_values = st.one_of(numbers, st.text(max_size=20), json_values.map(lambda v: json.dumps(v, allow_nan=True)),
                        st.sampled_from(["[" * 5000 + "]" * 5000, "{}", "[]", "null"]), arrays())


@st.composite
def mutations(draw):
    kind = draw(st.sampled_from(["dataset", "delete", "attribute", "link", "huge"]))
    if kind == "attribute":
        return kind, draw(st.sampled_from(attributes())), draw(attr_values)
    return kind, draw(st.sampled_from(members())), draw(arrays()) if kind == "dataset" else None


def mutate(path: Path, mutation) -> None:
    kind, where, value = mutation
    with h5py.File(path, "r+") as f:
        if kind == "attribute":
            obj, key = where
            f[obj].attrs[key] = value
            return
        parent = f[where].parent
        name = where.rsplit("/", 1)[-1]
        del f[where]
        if kind == "dataset":
            parent.create_dataset(name, data=value)
        elif kind == "link":
            parent[name] = h5py.SoftLink(f"/{where}")
        elif kind == "huge":
            parent.create_dataset(name, shape=(10**11,), dtype="f8", chunks=(4096,))


def quietly(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.slow  # 60 files, each through every reader: 12 s
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(mutation=mutations())
def test_every_reader_reports_or_refuses_in_one_line_whatever_a_file_holds(mutation):
    with tempfile.TemporaryDirectory() as tmp:
        bad, fine = Path(tmp) / "bad.h5", Path(tmp) / "fine.h5"
        shutil.copy(good_file(), bad)
        shutil.copy(good_file(), fine)
        mutate(bad, mutation)
        for argv in (["report", tmp], ["report", tmp, "--format", "json"], ["diff", str(fine), str(bad)],
                     ["check", str(bad), "--reference", str(good_file().with_suffix(".toml"))], ["trace", str(bad),
                                                                                                 "-o", f"{tmp}/t.json"],
                     ["calibrate", str(bad)]):
            code, err = quietly(argv)
            lines = [line for line in err.splitlines() if line.strip()]
            assert "Traceback" not in err and len(lines) <= 1, (argv, mutation, err)
            assert code in (0, 1, 2), (argv, code, err)
            if argv[0] == "report":  # the good file is reported whatever its neighbour is
                assert code == 0, (argv, err)
            if lines:
                assert "bad.h5" in lines[0], (argv, err)


def column(name, change):
    def edit(f):
        data = f[name][()]
        del f[name]
        f[name] = change(data)
    return edit


def attr(where, key, value):
    def edit(f):
        f[where].attrs[key] = value
    return edit


NAMED = {  # → words of the one line
    "a config nested 200,000 deep": (attr("/", "config", "[" * 200000 + "]" * 200000), "nested too deeply"),
    "a dataset declaring 10^11 floats": (lambda f: (f.__delitem__("model/final_params"), f.create_dataset(
        "model/final_params", shape=(10**11,), dtype="f8", chunks=(4096,))), "more than half this machine's memory"),
    "a soft link that loops": (lambda f: f["timeline"].__setitem__("loop", h5py.SoftLink("/timeline/loop")),
                               "hpcbench writes no links"),
    "a group linked to itself": (lambda f: (f.__delitem__("evals"), f.__setitem__("evals", h5py.SoftLink("/evals"))),
                                 "hpcbench writes no links"),
    "float phase codes": (column("timeline/phase", lambda d: d.astype(float) + 0.5), "timeline/phase"),
    "phase codes past the names": (column("timeline/phase", lambda d: d + 200), "timeline/phase"),
    "op codes past the names": (column("timeline/op", lambda d: d + 50), "timeline/op"),
    "a two-dimensional t_start": (column("timeline/t_start", lambda d: np.stack([d, d], 1)), "one-dimensional"),
    "NaN times": (column("timeline/t_end", lambda d: d * np.nan), "not finite"),
    "no ops attribute": (lambda f: f["timeline"].attrs.__delitem__("ops"), "timeline/op"),
    "phases that are numbers": (attr("timeline", "phases", "[1, 2]"), "not a list of names"),
    "rank 99": (column("timeline/rank", lambda d: d + 99), "timeline/rank"),
    "negative durations": (column("timeline/t_end", lambda d: d - 1e6), "negative duration"),
    "NaN evaluation times": (column("evals/t", lambda d: d * np.nan), "evals/t"),
    "worker 99 in the updates": (column("server/updates/worker", lambda d: d + 99), "server/updates"),
    "NaN clock offsets": (column("timeline/clock_offset_s", lambda d: d * np.nan), "clock_offset_s"),
    "samples = inf": (attr("summary", "samples", np.inf), "not a finite count"),
    "a negative wall time": (attr("summary", "wall_s", -3.0), "summary wall_s = -3.0 is not a duration"),
    "schema 0": (attr("/", "schema_version", 0), "schema_version 0"),
    "a config of 50 MB": (attr("/", "config", json.dumps({"x": "a" * (50 << 20)})), "config attribute of"),
    "a provenance value that is an array": (attr("provenance", "network", np.zeros(3)), "provenance network"),
    "a real run's summary that is a dataset": (lambda f: (f.attrs.__setitem__("mode", "mpi"), f.__delitem__("summary"),
                                                          f.create_dataset("summary", data=np.zeros(3))),
                                               "/summary is a dataset"),
    "a server table that is a dataset": (lambda f: (f.__delitem__("server/late"), f.create_dataset(
        "server/late", data=np.zeros(3))), "/server/late is a dataset"),
    "a summary value of 1 MB of text": (attr("summary", "samples_per_s", "x" * (1 << 20)), "1,048,576 characters"),
}


@pytest.mark.parametrize("name", NAMED)
def test_each_known_bad_file_is_one_line_naming_what_is_wrong_for_every_reader(name, tmp_path):
    change, says = NAMED[name]
    every_reader_refuses(tmp_path, change, says)


def every_reader_refuses(tmp_path, change, says):
    """A copy of the good file, changed, is one line saying ``says`` for every reader (report skips it)."""
    bad, fine = tmp_path / "bad.h5", tmp_path / "fine.h5"
    shutil.copy(good_file(), bad)
    shutil.copy(good_file(), fine)
    with h5py.File(bad, "r+") as f:
        change(f)
    reference = str(good_file().with_suffix(".toml"))
    for argv in (["report", str(tmp_path)], ["diff", str(fine), str(bad)], ["check", str(bad), "--reference",
                                                                            reference],
                 ["trace", str(bad), "-o", str(tmp_path / "t.json")], ["calibrate", str(bad)]):
        code, err = quietly(argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in err and says in lines[0] and "\x1b" not in err, (argv, err)
        assert len(lines[0]) < 2000, (argv, lines[0][:3000])
        assert code == (0 if argv[0] == "report" else 2), (argv, code, err)


def test_a_control_sequence_in_a_file_or_its_name_reaches_the_terminal_escaped(tmp_path, capsys):
    path = tmp_path / "odd.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:  # the model's name where the file names it (its settings name the same)
        f.attrs["model"] = "mlp\x1b[2J\x1b]0;owned\x07"
        f.attrs["config"] = json.dumps({**json.loads(f.attrs["config"]), "model": f.attrs["model"]})
    (tmp_path / "\x1b[31mred.h5").write_text("not a result")
    assert main(["report", str(tmp_path), "--wide"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b[31mred.h5" in err



BIDI = "\u202e\u2066"  # right-to-left override, left-to-right isolate: both reorder the text after them


@pytest.mark.parametrize("argv", [["report", "{dir}", "--wide"], ["report", "{dir}", "--format", "md"],
                                  ["diff", "{fine}", "{odd}"], ["check", "{dir}", "--reference", "{ref}"],
                                  ["calibrate", "{odd}"]])
def test_bidi_controls_in_a_file_name_or_an_attribute_reach_the_terminal_escaped(tmp_path, capsys, argv):
    odd, fine = tmp_path / f"odd{BIDI}gnp.h5", tmp_path / "fine.h5"
    shutil.copy(good_file(), odd)
    shutil.copy(good_file(), fine)
    with h5py.File(odd, "r+") as f:  # a setting that tells the two runs apart, so every table names it
        f.attrs["model"] = f"mlp{BIDI}lanoitan"
        f.attrs["config"] = json.dumps({**json.loads(f.attrs["config"]), "model": f.attrs["model"]})
    (tmp_path / f"junk{BIDI}.h5").write_text("not a result")
    (tmp_path / "ref.toml").write_text("[ga-asgd.2]\nsamples_per_s = [1e12, 1e13]\n")  # every run misses it
    main([a.format(dir=tmp_path, fine=fine, odd=odd, ref=tmp_path / "ref.toml") for a in argv])
    out, err = capsys.readouterr()
    assert not {"\u202e", "\u2066"} & set(out + err), (out, err)
    said = out + err
    assert ("mlp\\u202e\\u2066lanoitan" in said) == (argv[0] != "calibrate"), said  # the attribute
    if argv[0] != "diff":  # the file names (diff names no file)
        assert "junk\\u202e\\u2066.h5" in said or "odd\\u202e\\u2066gnp.h5" in said, said


def vlen_texts(f):
    f["provenance"].create_dataset("notes", data=np.array([""] * 200_000, dtype=object), dtype=h5py.string_dtype())


def compressed_zeros(f):
    f["model"].create_dataset("zeros", shape=(2_000_000,), dtype="f8", compression="gzip", fillvalue=0.0)
    f["model/zeros"][:1000] = 0.0  # a few KB on disk, 16 MB when read


def unwritten(f):
    f["model"].create_dataset("sparse", shape=(2_000_000,), dtype="f8", chunks=(1000,))  # no chunk on disk


def long_attribute(f):
    f.attrs["error"] = "e" * (12 << 20)  # stored as it is read: the file's own size counts it


@pytest.mark.parametrize("change", [vlen_texts, compressed_zeros, unwritten, long_attribute])
def test_what_a_file_would_take_when_read_counts_against_the_memory_limit(tmp_path, monkeypatch, change):
    import hpcbench.results.validation as validation

    monkeypatch.setattr(validation, "memory_bytes", lambda: 16 << 20)  # readers may take 8 MiB a file
    every_reader_refuses(tmp_path, change, "more than half this machine's memory")


def test_the_good_file_fits_the_memory_limit_it_is_read_under(tmp_path, monkeypatch):
    import hpcbench.results.validation as validation

    monkeypatch.setattr(validation, "memory_bytes", lambda: 16 << 20)
    assert quietly(["trace", str(good_file()), "-o", str(tmp_path / "t.json")])[0] == 0


def test_a_long_text_attribute_is_shown_cut_with_how_long_it_was(tmp_path, capsys):
    path = tmp_path / "long.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:
        f.attrs["status"] = "failed"
        f.attrs["error"] = "e" * (20 << 20)
    for argv in (["report", str(path)], ["report", str(path), "--wide"], ["report", str(path), "--format", "json"]):
        assert main(argv) == 0, argv
        out, err = capsys.readouterr()
        assert len(out + err) < 50_000 and "20,971,520 characters in all" in out, argv


def test_status_shows_a_long_status_cut_and_a_file_no_reader_takes_as_unreadable(tmp_path, capsys):
    shutil.copy(good_file(), tmp_path / "long.h5")
    shutil.copy(good_file(), tmp_path / "odd.h5")
    with h5py.File(tmp_path / "long.h5", "r+") as f:
        f.attrs["status"] = "s" * (1 << 20)
    with h5py.File(tmp_path / "odd.h5", "r+") as f:
        del f["summary"]
        f["summary"] = np.zeros(3)
    (tmp_path / "study.json").write_text(json.dumps({"points": [{"stem": "long", "algo": "ga-asgd"},
                                                                 {"stem": "odd", "algo": "ga-asgd"}]}))
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert len(out) < 5_000 and "1,048,576 characters" in out, out[:5000]
    assert "0 of 2 points have an ok result" in out and re.search(r"odd +unreadable", out), out


def trace_of(tmp_path, change):
    path = tmp_path / "odd.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:
        change(f)
    return quietly(["trace", str(path), "-o", str(tmp_path / "t.json")])


def refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_a_trace_writes_an_accuracy_that_was_not_measured_as_null(tmp_path):
    def change(f):  # two snapshots not scored (a failed run's file scores those a few seconds allow)
        f["evals/accuracy"][:2] = [np.nan, np.nan]
        f["summary"].attrs["best_accuracy"] = np.nan  # the best of the evaluations, as the writer takes it
    code, err = trace_of(tmp_path, change)
    assert code == 0 and not err, err
    events = json.loads((tmp_path / "t.json").read_text(), parse_constant=refuse)["traceEvents"]
    scored = [e["args"]["accuracy"] for e in events if e["name"] == "evaluation"]
    assert scored[:2] == [None, None] and all(isinstance(a, float) for a in scored[2:]), scored
    assert len([e for e in events if e["name"] == "accuracy"]) == len(scored) - 2


@pytest.mark.parametrize("column", ["timeline/t_end", "evals/t"])
def test_a_trace_refuses_times_too_large_for_microseconds_in_one_line_and_leaves_no_file(tmp_path, column):
    def change(f):
        f[column][-1] = 1e305
        f["summary"].attrs["wall_s"] = 1e305  # a run that long (an evaluation after its end is refused before)
        f["summary"].attrs["samples_per_s"] = f["summary"].attrs["samples"] / 1e305
    (tmp_path / "t.json").write_text("before")
    code, err = trace_of(tmp_path, change)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "odd.h5" in lines[0] and "too large" in lines[0], err
    assert (tmp_path / "t.json").read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.h5", "t.json"]


def test_a_trace_that_cannot_be_written_whole_leaves_what_was_there(tmp_path, monkeypatch):
    import hpcbench.report.trace as trace

    (tmp_path / "t.json").write_text("before")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(trace.os, "replace", full)
    code, err = quietly(["trace", str(good_file()), "-o", str(tmp_path / "t.json")])
    assert code == 2 and "cannot write the trace to" in err and "No space left on device" in err, err
    assert (tmp_path / "t.json").read_text() == "before" and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def sparse_timeline(f):
    del f["timeline/t_start"]
    f["timeline"].create_dataset("t_start", shape=(12_000_000,), dtype="f8", chunks=(100_000,))  # none on disk


def zeros_bomb(f):
    f["model"].create_dataset("bomb", data=np.zeros(10_000_000), chunks=(1_000_000,), compression="gzip",
                              compression_opts=9)  # 80 MB of zeros in about 80 KB


@pytest.mark.parametrize("change", [sparse_timeline, zeros_bomb])
def test_a_file_that_declares_far_more_than_it_holds_is_refused_whatever_the_memory(tmp_path, change):
    """Reading is bounded by what the file holds: a timeline of chunks never written or a gzip bomb, well within
    half this machine's memory, is refused before anything is read (it would take 100 MB for 100 KB)."""
    every_reader_refuses(tmp_path, change, "times what it holds")


def test_hpcbench_files_hold_far_more_than_the_refusal_asks(tmp_path):
    """A long simulated run's file (its timeline gzipped as hpcbench writes it) declares a few times its size."""
    from hpcbench.results.validation import HELD_RATIO, read_bytes

    path = tmp_path / "long.h5"
    assert quietly(["simulate", "--algo", "allreduce", "--workers", "64", "--steps", "400", "--numerics", "off",
                    "--out", str(path)])[0] == 0
    with h5py.File(path) as f:
        declared = []
        f.visititems(lambda name, obj: declared.append(read_bytes(obj)) if isinstance(obj, h5py.Dataset) else None)
    assert sum(declared) > 3 << 20 and sum(declared) < 5 * path.stat().st_size < HELD_RATIO * path.stat().st_size
