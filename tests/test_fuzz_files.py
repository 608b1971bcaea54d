"""Readers over files nobody planned: a real result file with one member or attribute replaced by
anything Hypothesis draws (any type, shape, value; NaN, infinities, negatives, huge declared sizes, links,
nesting) is either reported or refused in one line, by every reader, never a traceback; and the good
file beside it is still reported."""
from __future__ import annotations

import contextlib
import io
import json
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
    "a negative wall time": (attr("summary", "wall_s", -3.0), "negative duration"),
    "schema 0": (attr("/", "schema_version", 0), "schema_version 0"),
    "a config of 50 MB": (attr("/", "config", json.dumps({"x": "a" * (50 << 20)})), "config attribute of"),
    "a provenance value that is an array": (attr("provenance", "network", np.zeros(3)), "provenance network"),
}


@pytest.mark.parametrize("name", NAMED)
def test_each_known_bad_file_is_one_line_naming_what_is_wrong_for_every_reader(name, tmp_path):
    change, says = NAMED[name]
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
        assert code == (0 if argv[0] == "report" else 2), (argv, code, err)


def test_a_control_sequence_in_a_file_or_its_name_reaches_the_terminal_escaped(tmp_path, capsys):
    path = tmp_path / "odd.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:
        f.attrs["model"] = "mlp\x1b[2J\x1b]0;owned\x07"
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
        f.attrs["config"] = json.dumps({**json.loads(f.attrs["config"]), "model": f"mlp{BIDI}lanoitan"})
    (tmp_path / f"junk{BIDI}.h5").write_text("not a result")
    (tmp_path / "ref.toml").write_text("[ga-asgd.2]\nsamples_per_s = [1e12, 1e13]\n")  # every run misses it
    main([a.format(dir=tmp_path, fine=fine, odd=odd, ref=tmp_path / "ref.toml") for a in argv])
    out, err = capsys.readouterr()
    assert not {"\u202e", "\u2066"} & set(out + err), (out, err)
    said = out + err
    assert ("mlp\\u202e\\u2066lanoitan" in said) == (argv[0] != "calibrate"), said  # the attribute
    if argv[0] != "diff":  # the file names (diff names no file)
        assert "junk\\u202e\\u2066.h5" in said or "odd\\u202e\\u2066gnp.h5" in said, said
