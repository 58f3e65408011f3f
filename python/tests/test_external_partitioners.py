# SPDX-License-Identifier: Apache-2.0
"""bench/external_partitioners.py on one tiny cell, so that the benchmark keeps running: KaHyPar
and Mt-KaHyPar partition dcp's exported hypergraph, and dcp reads every partition back in the
vertex order the script wrote it (km1 counted by the script from the hMETIS file equals dcp's)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("kahypar")
pytest.importorskip("mtkahypar")

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "external_partitioners.py"


def _dcp_cli() -> pathlib.Path:
    """The dcp command: $DCP_CLI (set by CTest), else the default build tree's."""
    cli = pathlib.Path(os.environ.get("DCP_CLI", REPO / "build" / "dcp"))
    if not cli.is_file():
        pytest.skip(f"no dcp command at {cli} (set DCP_CLI)")
    return cli


def test_every_partition_goes_through_the_pipeline(tmp_path):
    rows_file = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--dcp", str(_dcp_cli()), "--datasets", "ldc",
         "--scales", "1", "--masks", "lambda", "--topologies", "2x8", "--tokens", "32768",
         "--repeats", "1", "--mt-presets", "default", "--threads", "1,2",
         "--work", str(tmp_path / "work"), "--json-out", str(rows_file)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads(rows_file.read_text())

    got = sorted((r["partitioner"], r["threads"], r["balance"]) for r in rows)
    assert got == sorted([("dcp", 1, "dcp"), ("dcp eps-memory 100", 1, "dcp"),
                          ("dcp flat", 1, "dcp")] + [
        (tool, threads, balance) for balance in ("dcp", "bound", "flat")
        for tool, threads in (("kahypar", 1), ("mtkahypar default", 1),
                              ("mtkahypar default", 2))])
    bound = (1 + 0.4) * (1 + 0.1)
    dcp = next(r for r in rows if r["partitioner"] == "dcp")
    flat = next(r for r in rows if r["partitioner"] == "dcp flat")
    assert dcp["origin"].startswith("dcp 1024:0.1/0.4") and dcp["balanced"], dcp
    # dcp flat is placed on one level of 16 devices, read back and simulated on 2x8 as the
    # externals' partitions are.
    assert flat["origin"].startswith("given 1024"), flat
    reached = {"bound": bound - 1, "dcp": dcp["compute"] - 1, "flat": flat["compute"] - 1}
    for r in rows:
        assert "error" not in r, r
        assert r["simulated_ms"] > 0 and r["partition_ms"] > 0, r
        if r["partitioner"].startswith("dcp"):
            assert r["compute"] <= bound + 1e-9, r
            continue
        assert r["origin"].startswith("given 1024"), r
        assert r["epsilon"] == pytest.approx(reached[r["balance"]], abs=1e-5), r
        # The script's own km1 (hMETIS units, from the partition it wrote) is dcp's.
        assert r["km1_units"] * r["net_scale"] == pytest.approx(r["km1_bytes"], rel=1e-3), r

    table = [line for line in run.stdout.splitlines() if line.startswith("| ldc x1 lambda 2x8 |")]
    assert len(table) == len(rows) + 3  # and one line in each summary table (one per balance)
