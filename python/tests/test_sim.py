# SPDX-License-Identifier: Apache-2.0
"""dcp.simulate: a plan replayed on a cluster model."""

import json

import pytest

import dcp


@pytest.fixture(scope="module")
def plan():
    batch = dcp.Batch([2048, 512, 300], ["causal", "full", "lambda:sink=16,window=128"])
    # dcp's own placement, which moves data (another strategy's may keep every sequence whole).
    return dcp.plan(batch, "2x8", block_size=128, other_strategies=False)


def test_simulate_reports_positive_times(plan):
    report = dcp.simulate(plan, "p4de")
    assert report["cluster"] == "p4de"
    for name in ("forward", "backward"):
        p = report[name]
        assert p["makespan_s"] > 0 and p["busy_s"] > 0 and p["flows"] > 0
        assert p["attention_flops"] > 0
    assert report["total_s"] == pytest.approx(
        report["forward"]["makespan_s"] + report["backward"]["makespan_s"])
    assert report["compute_imbalance"] >= 1
    assert 0 < report["ideal_s"] < report["total_s"]
    assert report["efficiency"] == pytest.approx(report["ideal_s"] / report["total_s"])
    assert "trace_json" not in report


def test_simulate_on_another_cluster_and_with_a_trace(plan):
    report = dcp.simulate(plan, "h100", trace=True)
    assert report["total_s"] > 0
    assert "traceEvents" in json.loads(report["trace_json"])


def test_simulate_errors_raise_value_error(plan):
    with pytest.raises(ValueError, match="tpu"):
        dcp.simulate(plan, "tpu")
    # A plan may use part of each node; a node larger than the cluster's is refused, by plan
    # and by simulate.
    small = dcp.plan(dcp.Batch([100], "causal"), "1x4", block_size=32)
    assert dcp.simulate(small, "p4de")["total_s"] > 0
    with pytest.raises(ValueError, match="16 devices per node, more than a node of cluster"):
        dcp.plan(dcp.Batch([100], "causal"), "1x16", block_size=32)
    sixteen = json.dumps({"name": "sixteen", "devices_per_node": 16})
    wide = dcp.plan(dcp.Batch([100], "causal"), "1x16", block_size=32, cluster=sixteen)
    with pytest.raises(ValueError, match="16 devices per node, more than a node of cluster 'p4de'"):
        dcp.simulate(wide, "p4de")
