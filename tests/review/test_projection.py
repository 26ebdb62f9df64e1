"""The projection's arithmetic against NVIDIA's published DGX H100 runs (mlperf_review/projection.py).

The anchors are cited constants read from NVIDIA's v3.1 result logs (../shared/docs/mlperf_maskrcnn.md,
"Performance anchors"); the epochs come from mlperf-logging's RCP table, not from us."""
import pytest

from mlperf_review import projection


@pytest.mark.parametrize("anchor", projection.NVIDIA_ANCHORS, ids=lambda a: a.name)
def test_the_arithmetic_reproduces_nvidias_published_times_within_10_percent(anchor):
    p = projection.reproduce(anchor)
    # 1 node: 14.06 epochs x (81.7 s + 3.1 s) = 1,191 s against 1,150 s (the run stopped inside its 15th epoch);
    # 8 nodes: 17 x (14.2 s + 0.47 s) = 250 s against about 246 s
    assert abs(p.time_to_train_s - anchor.time_to_train_s) <= 0.10 * anchor.time_to_train_s, p.line()


def test_the_rcp_epochs_are_mlperf_loggings():
    assert projection.rcp_epochs(96) == pytest.approx(14.0556, abs=1e-3)
    assert projection.rcp_epochs(256) == pytest.approx(17.0)
    with pytest.raises(ValueError, match="no RCP at global batch 100"):
        projection.rcp_epochs(100)


def test_a_projection_from_nvidias_one_node_rate_lands_on_their_eight_node_run():
    """Fed NVIDIA's 1-node rate and gap, the scale assumptions give back their 8-node rate, gap and time. The
    assumptions are fitted to these two runs, so the 8-node rate and gap come back by construction: what the first
    two lines check is that project() applies them at 8 nodes (not at 4 or 32); the time is checked against the
    published one, which the fit did not use."""
    one = projection.NVIDIA_ANCHORS[0]
    rows = {p.nodes: p for p in projection.project(one.throughput, one.eval_gap_s, (1, 4, 8, 32))}
    assert rows[8].throughput == pytest.approx(8250.0, rel=1e-9)
    assert rows[8].eval_gap_s == pytest.approx(0.47, rel=1e-9)
    assert abs(rows[8].time_to_train_s - 246.0) <= 0.10 * 246.0
    assert rows[1].time_to_train_s > rows[4].time_to_train_s > rows[8].time_to_train_s > rows[32].time_to_train_s
    assert all(str(n) in rows[n].line() for n in rows)
