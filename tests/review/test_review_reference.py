"""Review of NVIDIA's published MLPerf v0.7 Mask R-CNN logs (../shared/reference_logs): the package checker's
verdict, the published scores, epochs, each cross-checked against mlperf-logging's own tools."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from helpers import require_shared  # noqa: E402
from official_reference import official_answer  # noqa: E402

from mlperf_review import review_folder  # noqa: E402
from mlperf_review import report  # noqa: E402

REF = ROOT.parent / "shared" / "reference_logs"  # ../shared/reference_logs next to the repository
SYSTEMS = {
    "dgx1_ngc20.06_pytorch": 153.78,
    "dgxa100_ngc20.06_pytorch": 82.16,
}

@pytest.fixture(autouse=True, scope="module")
def _reference_logs():
    require_shared(str(REF / "v0.7"), "NVIDIA's v0.7 reference logs")


@pytest.fixture(scope="module", params=sorted(SYSTEMS))
def system(request, tmp_path_factory):
    """One review per system for the whole module (the compliance checker runs once per log)."""
    folder = REF / "v0.7" / request.param
    out = tmp_path_factory.mktemp("review_" + request.param)
    review = review_folder(folder)
    report.write_review_outputs(review, out)
    return request.param, folder, review, out


@pytest.fixture(scope="module")
def plain_copies(tmp_path_factory):
    """Decompressed copies, for calling mlperf_logging's own functions directly."""
    out = {}
    for name in SYSTEMS:
        d = tmp_path_factory.mktemp("plain_" + name)
        for gz in sorted((REF / "v0.7" / name).glob("result_*.txt.gz")):
            with gzip.open(gz, "rb") as src, open(d / gz.name[:-3], "wb") as dst:
                shutil.copyfileobj(src, dst)
        out[name] = d
    return out


def _last_eval_epoch(path):
    last = None
    with gzip.open(path, "rt", encoding="latin-1") as fh:
        for line in fh:
            if ":::MLLOG" in line and '"eval_accuracy"' in line:
                last = json.loads(line.split(":::MLLOG", 1)[1])["metadata"]["epoch_num"]
    return last


def test_every_log_passes_0_7_0(system):
    name, folder, review, _ = system
    assert review.ruleset == "0.7.0" and review.ruleset_reason.startswith("detected from the date")
    assert len(review.runs) == 5
    for run in review.runs:
        assert run.compliance is not None and run.compliance.ruleset == "0.7.0"
        assert run.compliance.passed is True, (run.name, run.compliance.errors)
        assert run.status == "converged", run.status_detail
        assert run.division == "closed" and run.org == "NVIDIA"
    assert review.verdict == "PASS", review.problems


def test_score_and_verdict_are_the_official_tools(system, plain_copies, tmp_path):
    name, folder, review, _ = system
    score = review.score
    assert score.ok, score.message
    assert round(score.score_min, 2) == pytest.approx(SYSTEMS[name], abs=1e-9)
    off = official_answer(plain_copies[name], tmp_path, "0.7.0")
    assert off["verdict"] == review.verdict == "PASS" and off["rcp"] is None
    assert score.score_min == pytest.approx(off["score"], abs=1e-9)
    assert score.scaling_factor == 1.0 and not score.warnings
    assert len(score.used) == 3 and score.dropped_fastest and score.dropped_slowest
    text = report.render_text(review)
    assert "Package checker: PASS (mlperf-logging 4.1.68 package checker, ruleset 0.7.0)" in text
    assert f"Score:           {SYSTEMS[name]:.2f} min (result_summarizer: olympic mean of 3 runs" in text
    # 0.7.0 logs have no gradient_accumulation_steps: the newest ruleset would reject them, and the review says so
    assert "5 of 5 logs pass 0.7.0 but fail the newest Mask R-CNN ruleset, 3.1.0" in text


def test_epochs_are_the_last_eval_epoch(system, plain_copies):
    name, folder, review, _ = system
    from mlperf_logging.rcp_checker import rcp_checker
    for run in review.runs:
        gz = folder / (run.name + ".txt.gz")
        assert run.epochs == _last_eval_epoch(gz)
        # the RCP checker's own reading of the log gives the same epochs
        not_conv, epochs, bs, bench = rcp_checker.read_submission_file(
            str(plain_copies[name] / (run.name + ".txt")), "1.0.0", False)
        assert not_conv == 0 and epochs == run.epochs and bs == run.gbs and bench == "maskrcnn"
        assert run.first_target_epoch == run.epochs
        assert run.final_bbox >= 0.377 and run.final_segm >= 0.339


def test_run_facts(system):
    name, folder, review, _ = system
    gbs = {"dgx1_ngc20.06_pytorch": 48, "dgxa100_ngc20.06_pytorch": 64}[name]
    lr = {"dgx1_ngc20.06_pytorch": 0.06, "dgxa100_ngc20.06_pytorch": 0.08}[name]
    for run in review.runs:
        assert run.gbs == gbs
        assert run.hparams["opt_base_learning_rate"] == lr
        assert 0 < run.init_min < 20
        assert run.throughput_ips is not None and run.throughput_source.startswith("'&&&&")
        assert len(run.train_points) > 1000  # trainer progress lines -> loss/throughput curves
        assert len(run.seeds) == 1
        assert not run.issues
    assert review.rcp.applicable is False and "1.0.0" in review.rcp.explanation
    assert not review.hparam_warnings


def test_outputs_written(system):
    name, folder, review, out = system
    data = json.loads((out / report.JSON_NAME).read_text())
    assert data["verdict"] == "PASS"
    assert round(data["score"]["score_min"], 2) == SYSTEMS[name]
    assert len(data["runs"]) == 5
    md = (out / report.MD_NAME).read_text()
    assert f"{SYSTEMS[name]:.2f} min" in md and "| result_0 |" in md
    png = out / report.PNG_NAME
    assert png.stat().st_size > 10000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*tmp"))
    # the plotted AP series are the logged evals
    for run in review.runs:
        xs, ys = review.plot_data["BBOX AP per epoch"][run.name]
        assert xs == [e.epoch for e in run.evals]
        assert ys == pytest.approx([e.bbox for e in run.evals])
    assert review.plot_data["BBOX AP per epoch"]["target 0.377"][1] == [0.377, 0.377]
    assert set(review.plot_data) >= {"training loss", "training throughput per iteration",
                                     "SEGM AP vs time since run_start"}
