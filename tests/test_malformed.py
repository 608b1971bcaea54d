"""Readers take any file: malformed variants of a real result file (wrong types, missing members,
impossible values, not HDF5 at all, not a regular file) are each one skip line or one error line,
and the good files beside them are still reported."""
from __future__ import annotations

import json
import math
import os
import shutil

import h5py
import numpy as np
import pytest

from conftest import cli


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.h5"
    code, _, err = cli("simulate", "--algo", "asgd", "--workers", "2", "--steps", "6", "--set", "evals=3",
                       "--out", str(path))
    assert code == 0, err
    return path


def set_attr(where, key, value):
    def change(f):
        f[where].attrs[key] = value
    return change


def set_config(key, value):
    def change(f):
        config = json.loads(f.attrs["config"])
        config[key] = value
        f.attrs["config"] = json.dumps(config)
    return change


def delete(member):
    def change(f):
        del f[member]
    return change


def replace(member, data):
    def change(f):
        del f[member]
        f[member] = data
    return change


VARIANTS = {
    "workers as text": set_attr("/", "workers", "abc"),
    "no workers": set_attr("/", "workers", 0),
    "world size of 0": set_attr("/", "world_size", 0),
    "workers and world size disagree": set_attr("/", "world_size", 7),
    "an unknown mode": set_attr("/", "mode", "quantum"),
    "an unknown status": set_attr("/", "status", "maybe"),
    "algorithm as a number": set_attr("/", "algorithm", 3),
    "an unknown algorithm": set_attr("/", "algorithm", "nonsense"),
    "config of another algorithm": set_config("algo", "sgp"),
    "config of another model": set_config("model", "resnet20"),
    "schema version as text": set_attr("/", "schema_version", "4"),
    "config that is not JSON": set_attr("/", "config", "{not json"),
    "config evals as text": set_config("evals", "many"),
    "config budget as text": set_config("budget_samples", "lots"),
    "config batch size negative": set_config("batch_size", -3),
    "config schedule as a list": set_config("schedule", [1, 2]),
    "config schedule lr as text": set_config("schedule", {"lr": "fast", "text": "x"}),
    "summary value as text": set_attr("summary", "samples_per_s", "fast"),
    "summary samples negative": set_attr("summary", "samples", -5),
    "missing evals/accuracy": delete("evals/accuracy"),
    "missing provenance/hostnames": delete("provenance/hostnames"),
    "hostnames of another world": replace("provenance/hostnames", np.array([b"a"])),
    "timeline start as text": replace("timeline/t_start", np.array([b"x"] * 3)),
    "timeline columns of different lengths": replace("timeline/t_end", np.zeros(1)),
    "evals columns of different lengths": replace("evals/t", np.zeros(1)),
    "missing final model": delete("model/final_params"),
    "final model as text": replace("model/final_params", np.array([b"x"])),
    "server table without a column": delete("server/updates/worker"),
    "server table column as text": replace("server/updates/staleness", np.array([b"x"])),
    "missing summary": delete("summary"),
    "missing timeline": delete("timeline"),
}


def malformed(good, directory, name, change):
    path = directory / f"{name.replace(' ', '-').replace('/', '-')}.h5"
    shutil.copy(good, path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def one_line(err: str, path) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", VARIANTS)
def test_every_reader_gives_one_line_for_a_malformed_file_and_reports_the_good_ones(good, tmp_path, name):
    bad = malformed(good, tmp_path, name, VARIANTS[name])
    shutil.copy(good, tmp_path / "fine.h5")
    code, out, err = cli("report", str(tmp_path))
    assert code == 0 and "asgd" in out
    assert "skipped" in one_line(err, bad)
    code, out, err = cli("report", str(tmp_path), "--strict")
    assert code == 1 and "asgd" in out
    code, out, err = cli("report", str(tmp_path), "--format", "json")
    assert code == 0 and json.loads(out)
    one_line(err, bad)
    for command in (("trace", str(bad), "-o", str(tmp_path / "t.json")), ("calibrate", str(bad)),
                    ("diff", str(good), str(bad), "--strict")):
        code, out, err = cli(*command)
        assert code in (1, 2), (command, code, out, err)
        one_line(err, bad)


@pytest.mark.parametrize("content", [b"", b"not an hdf5 file at all" * 10])
def test_a_file_that_is_not_hdf5_is_one_line(tmp_path, good, content):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(content)
    shutil.copy(good, tmp_path / "fine.h5")
    code, out, err = cli("report", str(tmp_path))
    assert code == 0 and "asgd" in out
    one_line(err, bad)


@pytest.mark.timeout(60)
def test_a_path_that_is_not_a_regular_file_is_skipped_without_opening_it(tmp_path, good):
    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    (tmp_path / "dir.h5").mkdir()
    shutil.copy(good, tmp_path / "fine.h5")
    code, out, err = cli("report", str(tmp_path))
    assert code == 0 and "asgd" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("not a regular file" in line for line in lines), err
    for command in (("trace", str(fifo), "-o", str(tmp_path / "t.json")), ("calibrate", str(fifo)),
                    ("diff", str(good), str(fifo), "--strict")):
        code, _, err = cli(*command)
        assert code in (1, 2) and "not a regular file" in one_line(err, fifo)


def test_non_finite_numbers_in_a_summary_are_null_in_json(tmp_path, good):
    path = malformed(good, tmp_path, "unmeasured", set_attr("summary", "step_p99_s", math.nan))
    code, out, err = cli("report", str(path), "--format", "json")
    assert code == 0, err
    assert "NaN" not in out and json.loads(out)
