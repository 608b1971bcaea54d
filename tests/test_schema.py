"""The result-file contract: a written file holds exactly the names results/schema.py declares."""
from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest

from hpcbench.cli import main
from hpcbench.results import schema
from hpcbench.results.store import read_run, write_run


def names_in(path) -> dict[str, set[str]]:
    """What the file holds, read with h5py alone (not through the reader under test)."""
    with h5py.File(path, "r") as f:
        return {
            "root": set(f.attrs),
            "groups": set(f),
            "provenance": set(f["provenance"].attrs) | set(f["provenance"]),
            "timeline": set(f["timeline"]) - {"clock_offset_s"},
            "evals": set(f["evals"]),
            "summary": set(f["summary"].attrs),
            **{f"server/{t}": set(f["server"][t]) for t in f["server"]},
        }


@pytest.mark.parametrize("algo, tables, server_keys", [
    ("ga-asgd", ("updates", "late", "failures"), schema.SERVER_SUMMARY_KEYS),
    ("gossip", ("final_models", "learning_rate", "failures"), ()),
    ("allreduce", ("final_models", "learning_rate", "failures"), ()),
])
def test_a_simulated_run_writes_exactly_the_declared_names(tmp_path, algo, tables, server_keys):
    out = tmp_path / "r.h5"
    assert main(["simulate", "--algo", algo, "--workers", "3", "--steps", "6", "--numerics", "off",
                 "--out", str(out)]) == 0
    found = names_in(out)
    assert found["root"] == set(schema.ROOT_ATTRS)
    assert found["groups"] == {"provenance", "timeline", "evals", "server", "summary", "model", "simulation"}
    assert found["provenance"] == set(schema.PROVENANCE_ATTRS + schema.SIM_PROVENANCE_ATTRS
                                      + schema.PROVENANCE_PER_RANK)
    assert found["timeline"] == set(schema.TIMELINE_COLUMNS)
    assert found["evals"] == set(schema.EVAL_COLUMNS)
    assert found["summary"] == set(schema.SUMMARY_KEYS + server_keys)
    for table in tables:
        assert found[f"server/{table}"] == set(schema.TABLES[table] + schema.DERIVED_COLUMNS.get(table, ()))
    assert {k for k in found if k.startswith("server/")} == {f"server/{t}" for t in tables}


def test_the_writer_refuses_a_name_the_schema_does_not_declare(tmp_path):
    out = tmp_path / "r.h5"
    assert main(["simulate", "--algo", "asgd", "--workers", "2", "--steps", "3", "--numerics", "off",
                 "--out", str(out)]) == 0
    rec = read_run(out)
    for change in ({"summary": {**rec.summary, "staleness_mena": 1.0}},
                   {"tables": {**rec.tables, "updates": {**rec.tables["updates"], "extra": np.zeros(1)}}}):
        with pytest.raises(ValueError, match="not declared in hpcbench/results/schema.py: .*(staleness_mena|extra)"):
            write_run(tmp_path / "bad.h5", dataclasses.replace(rec, **change))
    assert not list(tmp_path.glob("bad*"))


def test_every_summary_name_the_report_reads_is_declared():
    from hpcbench.report.metrics import RunRow

    read = {f.name for f in dataclasses.fields(RunRow)} - {"algorithm", "mode", "workers", "nodes", "path", "settings",
                                                           "peak_lr", "evals",
                                                            "result", "error", "lr_recipe", "reached", "lost",
                                                            "stalled"}
    assert read <= set(schema.SUMMARY_KEYS)
    from hpcbench.report.metrics import Loss, Stall  # a row per worker lost or stalled: its table's columns, its host

    failures = schema.TABLES[schema.FAILURES] + schema.DERIVED_COLUMNS[schema.FAILURES]
    assert {f.name for f in dataclasses.fields(Loss)} - {"host"} <= set(failures)
    assert {f.name for f in dataclasses.fields(Stall)} - {"host"} <= set(schema.TABLES[schema.STALLS])


def test_every_undeclared_name_is_listed_at_once_whatever_part_it_is_in(tmp_path):
    out = tmp_path / "r.h5"
    assert main(["simulate", "--algo", "asgd", "--workers", "2", "--steps", "3", "--numerics", "off",
                 "--out", str(out)]) == 0
    rec = read_run(out)
    bad = dataclasses.replace(
        rec, attrs={**rec.attrs, "colour": "red"}, provenance={**rec.provenance, "moon": "full"},
        per_rank={**rec.per_rank, "shoe": ["a"] * 3}, timeline={**rec.timeline, "mood": np.zeros(1)},
        evals={**rec.evals, "vibe": np.zeros(1)},
        tables={**rec.tables, "updates": {**rec.tables["updates"], "extra": np.zeros(1)}},
        summary={**rec.summary, "staleness_mena": 1.0})
    assert schema.undeclared(bad) == ["attribute colour", "provenance moon", "provenance shoe", "timeline column mood",
                                      "evals column vibe", "server/updates column extra", "summary staleness_mena"]
    assert schema.undeclared(rec) == []


def test_a_column_an_algorithm_adds_to_the_updates_table_is_a_per_update_mean_with_its_summary():
    updates = {name: np.zeros(2) for name in schema.TABLES[schema.UPDATES]}

    def record(columns, summary=(), table=schema.UPDATES):
        tables = {table: {**(updates if table == schema.UPDATES else {}), **{c: np.zeros(2) for c in columns}}}
        return schema.RunRecord({}, {}, {}, {}, (), (), np.zeros(0), {}, tables, dict.fromkeys(summary, 0.0),
                                np.zeros(0))

    assert schema.undeclared(record(["drift_mean"], ["drift_mean", "drift_p50", "drift_p99"])) == []
    assert schema.undeclared(record(["drift", "Drift_mean", "two words_mean"])) == [
        "server/updates column drift", "server/updates column Drift_mean", "server/updates column two words_mean"]
    assert schema.undeclared(record([], ["drift_p50"])) == ["summary drift_p50"]  # no such column
    assert schema.undeclared(record(["drift_mean"], table=schema.LATE)) == ["server/late column drift_mean"]


def test_the_family_of_a_run_is_read_from_the_tables_it_kept():
    assert schema.family_of({"updates": {}, "late": {}}) == "server"
    assert schema.family_of({"updates": {}}) == "" and schema.family_of({"final_models": {}}) == ""
    assert schema.family_of({}) == ""


def test_a_file_may_be_of_every_algorithm_hpcbench_has_and_of_no_other():
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.results.schema import ALGORITHM_NAMES

    assert set(ALGORITHMS.names()) <= set(ALGORITHM_NAMES)  # a new algorithm's files are read (names never go)
