"""Differential tests: the review and mlperf-logging's own tools on the same folders must agree.

Every folder is generated with the project's MLPerfLogger (tests/review/review_loggen.py). For each, the test
computes inside itself what the official tools say (tests/review/official_reference.py: the package checker's
verdict, the RCP checker's verdict, the scaling.json it leads to, the result summarizer's score) and asserts the
review reports the same verdict, score, RCP verdict and normalization factor.
"""

import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

from official_reference import official_answer, official_compliance  # noqa: E402
from review_loggen import KEYS_NEWER_THAN_0_7_0, make_lines, write_log, write_runs  # noqa: E402

from mlperf_review import report, review_folder  # noqa: E402
from mlperf_review.cli import main  # noqa: E402

# Each test runs the official checkers on whole result folders (0.4-2.3 s each, 21 s in all): in make test's slow
# set, so that make test-fast stays under its minute (it took 54-67 s on 2 cores on 2026-11-27 with them)
pytestmark = pytest.mark.slow

TTTS = [100.0, 101.0, 102.0, 103.0, 110.0]
V1_GBS64 = dict(ruleset="1.0.0", gbs=64, lr=0.08, warmup_steps=800, warmup_factor=1e-4, decay_steps=(18000, 24000),
                num_image_candidates=8000)


def assert_same(review, off):
    """The review's verdict, score, RCP verdict and normalization are the official tools'."""
    assert review.verdict == off["verdict"], (review.problems, off["errors"])
    if off["score"] is None:
        assert review.score.score_min is None and not review.score.ok
    else:
        assert review.score.score_min == pytest.approx(off["score"], abs=1e-6)
    assert review.score.scaling_factor == pytest.approx(off["scaling_factor"] or 1.0, abs=1e-12)
    if off["rcp"] is None:
        assert not review.rcp.applicable and review.rcp.score_normalization is None
    else:
        assert review.rcp.applicable
        assert review.rcp.passed is bool(off["rcp"]["passed"]) and review.rcp.message == off["rcp"]["message"]
        if off["rcp"]["passed"]:
            assert review.rcp.score_normalization == pytest.approx(off["scaling_factor"] or 1.0, abs=1e-12)
            assert review.rcp.score_normalization == pytest.approx(off["rcp"]["norm"], abs=1e-12)
        else:
            assert review.rcp.score_normalization is None and off["scaling_factor"] is None
    assert (review.seeds.passed is False) == off["seeds_failed"]
    assert not review.score.warnings, review.score.warnings  # the explained runs reproduce the score


def check(folder, tmp_path, ruleset=None, official_ruleset=None, work="official"):
    review = review_folder(folder, ruleset=ruleset)
    off = official_answer(folder, tmp_path / work, official_ruleset or review.ruleset)
    assert_same(review, off)
    return review, off


def _faster(folder, **kw):
    for i, ttt in enumerate(TTTS):
        write_log(Path(folder) / f"result_{i}.txt", ttt_min=ttt, seed=1000 + i, **kw)


# ------------------------------------------------------------------------------------------------ run counts
def test_all_converged(tmp_path):
    write_runs(tmp_path / "d", TTTS)
    review, off = check(tmp_path / "d", tmp_path)
    assert review.verdict == "PASS" and review.ruleset == "3.1.0"
    assert review.score.score_min == pytest.approx(102.0, abs=1e-9)
    assert review.score.used == ["result_1", "result_2", "result_3"]


def test_one_aborted_run_is_accepted(tmp_path):
    """Finding 2: one non-converged run of five is accepted under olympic scoring (it counts as the slowest)."""
    d = tmp_path / "d"
    write_runs(d, TTTS[:4])
    write_log(d / "result_4.txt", ttt_min=90.0, seed=9, status="aborted", final_bbox=0.35, final_segm=0.32)
    review, off = check(d, tmp_path)
    assert review.verdict == "PASS", review.problems
    assert review.package.noncompliant_accepted
    assert review.score.score_min == pytest.approx((101 + 102 + 103) / 3, abs=1e-9)
    assert review.score.dropped_slowest == "result_4" and review.score.not_counted == ["result_4"]
    assert "1 file does not comply (result_4), accepted under olympic scoring" in report.render_text(review)


def test_nvidia_v3_like_folder_with_one_aborted_run(tmp_path):
    """Finding 2 on the situation of NVIDIA's published v3.x H100 Mask R-CNN folder: 3.x keys from every rank,
    GBS 256, tracked_stats throughput records, one of the five runs aborted with AP 0.0."""
    d = tmp_path / "d"
    kw = dict(t0_ms=1684008910171, gbs=256, lr=0.24, warmup_steps=2300, warmup_factor=0.24 / 2300,
              decay_steps=(6125, 8000), num_image_candidates=1000, epochs=17, ranks=2, tracked_stats=True,
              platform="8xNVIDIA DGX H100", org="NVIDIA", train_lines=False)
    for i, ttt in enumerate([13.9, 14.2, 14.0, 14.4]):
        write_log(d / f"result_{i}.txt", ttt_min=ttt, seed=2000 + i, **kw)
    write_log(d / "result_4.txt", ttt_min=9.3, seed=2004, status="aborted", final_bbox=0.0, final_segm=0.0,
              **dict(kw, epochs=20))
    review, off = check(d, tmp_path)
    assert review.verdict == "PASS" and review.ruleset == "3.0.0" and review.rcp.passed
    assert review.score.score_min == pytest.approx((14.0 + 14.2 + 14.4) / 3, abs=1e-9)


def test_two_aborted_runs_fail(tmp_path):
    d = tmp_path / "d"
    write_runs(d, TTTS[:3])
    for i in (3, 4):
        write_log(d / f"result_{i}.txt", ttt_min=100.0 + i, seed=i, status="aborted", final_bbox=0.30,
                  final_segm=0.30)
    review, off = check(d, tmp_path)
    assert review.verdict == "FAIL" and review.score.score_min is None
    assert any("2 result files fail the compliance checker (result_3, result_4)" in p for p in review.problems)
    assert review.rcp.passed is False and "2 of 5 runs did not converge" in review.rcp.explanation


@pytest.mark.parametrize("n", [4, 6])
def test_wrong_number_of_result_files(tmp_path, n):
    """Finding 3: maskrcnn needs exactly 5 result files; 6 used to PASS with 4 of them scored."""
    write_runs(tmp_path / "d", [100.0 + i for i in range(n)])
    review, off = check(tmp_path / "d", tmp_path)
    assert review.verdict == "FAIL"
    assert review.problems[0] == f"{n} result files: maskrcnn needs exactly 5 result_*.txt"
    assert review.package.file_count == (n, 5)
    text = report.render_text(review)
    assert "not publishable: the package checker rejects the folder" in text


def test_stray_log_is_not_a_run(tmp_path):
    """Finding 4: a stdout copy of a run next to the results is not a result file (it changed the score and
    made the seed check fail)."""
    d = tmp_path / "d"
    write_runs(d, TTTS, ruleset="1.0.0", gbs=96, lr=0.12, decay_steps=(12000, 16000), warmup_factor=0.000192)
    write_log(d / "slurm-1234.log", ttt_min=50.0, seed=1000, ruleset="1.0.0", gbs=96, lr=0.12)
    (d / "notes.txt").write_text("not a log\n")
    review, off = check(d, tmp_path)
    assert review.verdict == "PASS" and len(review.runs) == 5
    assert review.score.score_min == pytest.approx(102.0, abs=1e-9) and review.seeds.passed is True
    assert any(x.startswith("slurm-1234.log: not a result file") for x in review.ignored)


# ------------------------------------------------------------------------------------------------ RCP normalization
def test_gbs64_faster_than_rcp_is_normalized(tmp_path):
    """Finding 1: the issue's example, 1.0.0 at GBS 64 converging in 13 epochs: 69.33 min raw, 74.67 official."""
    d = tmp_path / "d"
    for i, ttt in enumerate([68.0, 69.0, 208 / 3, 69.0 + 2 / 3, 72.0]):
        write_log(d / f"result_{i}.txt", ttt_min=ttt, seed=1000 + i, epochs=13, **V1_GBS64)
    review, off = check(d, tmp_path)
    assert round(review.score.raw_score_min, 2) == 69.33 and round(review.score.score_min, 2) == 74.67
    assert review.rcp.score_normalization == pytest.approx(14 / 13)
    assert "x1.0769 RCP normalization of 69.33 min" in review.score.message


def test_gbs48_faster_than_interpolated_rcp(tmp_path):
    """GBS 48 under 3.1.0: its RCP is pruned, so it is interpolated (between GBS 8 and 128); 13 epochs are faster
    than the interpolated mean."""
    _faster(tmp_path / "d", epochs=13)
    review, off = check(tmp_path / "d", tmp_path)
    assert review.rcp.message == "RCP Interpolation" and review.rcp.score_normalization > 1.0
    assert "interpolated" in review.rcp.explanation


def test_gbs8_lr_0_01_by_ruleset(tmp_path):
    """BASE_LR 0.02/2 at GBS 8: rejected by 0.7.0 (0.02*K only), accepted by 2.0.0, where GBS 8 has its own RCP
    and epochs 12,12,12,13,13 are faster than its mean (normalization > 1)."""
    d = tmp_path / "d"
    for i, (ttt, ep) in enumerate(zip(TTTS, [12, 12, 12, 13, 13])):
        write_log(d / f"result_{i}.txt", ttt_min=ttt, seed=1000 + i, epochs=ep, ruleset="2.0.0", gbs=8, lr=0.01,
                  num_image_candidates=1000)
    review, _ = check(d, tmp_path, work="a")
    assert review.ruleset == "2.0.0" and review.verdict == "PASS"
    assert review.rcp.message == "RCP found" and review.rcp.score_normalization > 1.0
    old, _ = check(d, tmp_path, ruleset="0.7.0", work="b")
    assert old.verdict == "FAIL" and not old.rcp.applicable
    assert all(r.compliance.passed is False for r in old.runs)
    assert any("opt_base_learning_rate 0.01 is not 0.02*K" in w for w in old.hparam_warnings)


def test_rcp_failure_says_what_failed(tmp_path):
    """Finding 8: no normalization factor for a failed RCP check, and the message says what failed."""
    _faster(tmp_path / "d", epochs=10, ruleset="1.0.0", gbs=96, lr=0.12, decay_steps=(12000, 16000))
    review, off = check(tmp_path / "d", tmp_path)
    assert review.verdict == "FAIL" and review.rcp.passed is False
    line = report.rcp_line(review)
    assert "normaliz" not in line.lower()
    assert "converges too fast: olympic mean of the epochs to converge 10.00 < the RCP interpolated for GBS 96" \
        in line and "fastest mean allowed 12.94" in line
    assert review.problems == ["RCP check failed: " + review.rcp.explanation]


# ------------------------------------------------------------------------------------------------ multi-rank
def test_repeated_run_start_times_from_the_summarizers_record(tmp_path):
    """Finding 6: every rank logs run_start; result_summarizer times the run from the last one before run_stop."""
    d = tmp_path / "d"
    write_runs(d, TTTS, ranks=4, rank_delay_ms=20000)
    review, off = check(d, tmp_path)
    assert review.score.score_min == pytest.approx(102.0, abs=1e-9)  # 3 ranks x 20 s later than rank 0
    for r, ttt in zip(review.runs, TTTS):
        assert r.run_start_count == 4 and r.ttt_min == pytest.approx(ttt, abs=1e-9)
        assert any("run_start logged 4 times" in n for n in r.notes)


# ------------------------------------------------------------------------------------------------ rulesets
NOW_MS = 1717200000000  # 2024-06-01: after the last Mask R-CNN round


def test_default_0_7_0_era_log_and_the_newest_ruleset(tmp_path):
    """Finding 5: a log without the newer keys is 0.7.0-compliant; the review says it fails 3.1.0, and a log of
    that kind written today is reviewed (and rejected) as 3.1.0. --ruleset always wins."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_runs(old, TTTS, ruleset="0.7.0", omit=KEYS_NEWER_THAN_0_7_0)
    review, _ = check(old, tmp_path, work="a")
    assert review.ruleset == "0.7.0" and review.verdict == "PASS"
    assert sorted(review.newest_failures) == [f"result_{i}" for i in range(5)]
    assert "gradient_accumulation_steps" in review.newest_failures["result_0"]
    for r in review.runs:
        assert r.newest_compliance.passed is official_compliance(r.path, "3.1.0") is False
    assert "5 of 5 logs pass 0.7.0 but fail the newest Mask R-CNN ruleset, 3.1.0" in report.render_text(review)

    write_runs(new, TTTS, t0_ms=NOW_MS, omit=KEYS_NEWER_THAN_0_7_0)
    today, _ = check(new, tmp_path, work="b")
    assert today.ruleset == "3.1.0" and today.verdict == "FAIL" and "after the last" in today.ruleset_reason
    forced, _ = check(new, tmp_path, ruleset="0.7.0", work="c")
    assert forced.ruleset == "0.7.0" and forced.ruleset_reason == "given with --ruleset"
    assert forced.verdict == "PASS" and all(r.compliance.ruleset == "0.7.0" for r in forced.runs)


def test_1_0_0_log_with_and_without_ruleset(tmp_path):
    """A 1.0.0 log (no weights_initialization, as 1.0.0 logs were): detected 1.0.0 and accepted; under
    --ruleset 2.1.0, which wants the 21 weights_initialization records, rejected."""
    d = tmp_path / "d"
    _faster(d, omit=("weights_initialization",), ruleset="1.0.0", gbs=96, lr=0.12, decay_steps=(12000, 16000))
    review, _ = check(d, tmp_path, work="a")
    assert review.ruleset == "1.0.0" and review.verdict == "PASS" and review.newest_failures == {}
    assert all(official_compliance(r.path, "3.1.0") for r in review.runs)
    forced, _ = check(d, tmp_path, ruleset="2.1.0", work="b")
    assert forced.ruleset == "2.1.0" and forced.verdict == "FAIL"
    assert any("occurrence of 'weights_initialization' but found 0" in e for e in forced.runs[0].compliance.errors)


def test_superset_log_passes_every_ruleset(tmp_path):
    """MLPerfLogger's default output: one folder, accepted by the package checker of each distinct Mask R-CNN
    rule set (1.1.0 and 2.0.0 check the logs as 2.1.0 does, 3.0.0 as 3.1.0; all seven compliance checkers run
    on a real training log in tests/engine/test_mlperf_log_rulesets.py)."""
    _faster(tmp_path / "d", gbs=128, lr=0.16, decay_steps=(9000, 12000), num_image_candidates=4000)
    for rs in ("0.7.0", "1.0.0", "2.1.0", "3.1.0"):
        review, _ = check(tmp_path / "d", tmp_path, ruleset=rs, work=rs)
        assert review.verdict == "PASS", (rs, review.problems)


# ------------------------------------------------------------------------------------------------ compare, plots
def test_compare_uses_normalized_scores(tmp_path, capsys):
    """Finding 1 (--compare): the scores compared are the official, normalized ones; the raw ones are a row
    of their own."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_runs(a, TTTS, epochs=14, **V1_GBS64)
    write_runs(b, TTTS, epochs=13, **V1_GBS64)
    rc = main([str(a), "--compare", str(b), "--out", str(tmp_path / "out"), "--no-plot"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = {ln.split("  ")[0]: ln.split() for ln in out.splitlines()}
    assert rows["score (min)"][2:] == ["102.00", f"{102 * 14 / 13:.2f}", f"{14 / 13:.3f}"]
    assert rows["score before RCP normalization (min)"][-3:] == ["102.00", "102.00", "1.000"]
    assert rows["RCP normalization"][-2:] == ["1.0000", "1.0769"]
    data = json.loads((tmp_path / "out" / report.COMPARE_JSON_NAME).read_text())
    assert data["b"]["score_min"] == pytest.approx(official_answer(b, tmp_path / "ob", "1.0.0")["score"], abs=1e-9)


def test_throughput_plot_is_monotonic_in_time(tmp_path):
    """Finding 7: NVIDIA's tracked_stats step restarts every epoch; the panel plots against minutes since
    run_start, so the line never runs back."""
    write_log(tmp_path / "result_0.txt", tracked_stats=True, train_lines=False, epochs=4, ttt_min=40.0)
    review = review_folder(tmp_path)
    report.write_review_outputs(review, tmp_path / "out")
    run = review.runs[0]
    xs, ys = review.plot_data["training throughput vs time since run_start"]["result_0"]
    assert xs == sorted(xs) and len(xs) == 8 and 0 < xs[0] and xs[-1] < 40.0
    assert xs == pytest.approx([p[0] for p in run.tracked_throughput])
    assert ys[:2] == [302.0, 303.0]  # tracked_stats values, not the duplicate 'throughput' records


def test_the_compare_tables_olympic_epochs_are_the_rcp_checkers_mean(tmp_path, caplog):
    """The compare table's 'epochs (olympic mean)' averaged the compliant runs' epochs, an aborted run's among them:
    14.33 where the RCP checker, which counts a run that did not converge as never converging (1e9 epochs, then
    dropped as the slowest), says 14.67. Differential: the checker's own 'Submission mean epochs'."""
    import logging

    from mlperf_logging.rcp_checker import rcp_checker

    for i, e in enumerate((13, 14, 15, 15, 14)):
        write_log(tmp_path / f"result_{i}.txt", epochs=e, ttt_min=100.0 + i, seed=10 + i, status=(
            "aborted" if i == 0 else "success"), final_bbox=0.30 if i == 0 else 0.379, **V1_GBS64)
    with caplog.at_level(logging.INFO):
        rcp_checker.check_directory(str(tmp_path), "training", "1.0.0", False, False, rcp_pass="pruned_rcps")
    [official] = [float(r.getMessage().split(":")[1]) for r in caplog.records
                  if r.getMessage().strip().startswith("Submission mean epochs")]
    review = review_folder(tmp_path, ruleset="1.0.0")
    assert report.compare_metrics(review)["epochs_olympic_mean"] == pytest.approx(official, abs=1e-4)


def test_gzipped_result_files_are_reviewed_with_a_warning_the_checker_would_find_none(tmp_path):
    """result_<n>.txt.gz (as NVIDIA's published logs are stored) are reviewed decompressed, and the verdict said
    'the package checker accepts the folder'; mlperf-logging's package checker on that folder as it is finds no
    result file. The review says so (differential: the checker's own file count on the folder as it is)."""
    import logging
    import shutil

    for i, e in enumerate((14, 14, 15, 15, 14)):
        write_log(tmp_path / "r" / f"result_{i}.txt.gz", epochs=e, ttt_min=100.0 + i, seed=10 + i, **V1_GBS64)
    review = review_folder(tmp_path / "r", ruleset="1.0.0")
    gz = [w for w in review.warnings if "gzip" in w]
    assert len(gz) == 1 and "result_0.txt.gz" in gz[0] and "result_<n>.txt" in gz[0], review.warnings
    # the folder as it is, laid out for the package checker: it counts no result file
    from mlperf_logging.package_checker import package_checker
    from mlperf_review import official

    org = tmp_path / "pkg" / "TESTORG"
    bench = org / "results" / "sys" / "maskrcnn"
    shutil.copytree(tmp_path / "r", bench)
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "sys.json").write_text(json.dumps(official.system_description("TESTORG", "sys", "closed",
                                                                                     "onprem")))
    with official.captured() as cap:
        try:  # it goes on to the RCP check with no runs, which raises (KeyError: no benchmark read)
            package_checker.check_training_package(str(org), "training", "1.0.0", False, False, False, False,
                                                   False, str(tmp_path / "pc.log"))
        except KeyError:
            pass
    counts = [r.getMessage() for r in cap.records if r.levelno >= logging.ERROR]
    assert any(m.startswith("Incorrect number of files") and m.endswith("found 0, expected 5") for m in counts), counts


def test_the_review_reads_the_records_mlperf_loggings_parser_reads(tmp_path):
    """Two records on one line (two processes writing at once): mlperf-logging's parser keeps only the last (its
    greedy strip up to the last ':::MLLOG '); a ':::MLLOG{' without the space it does not read at all. The review
    read every record, so a run's status, epochs and scores could come from events the official tools never saw
    (a target-reaching eval_accuracy hidden before another record: 'converged' where the checker found no target).
    Differential: the keys mlperf-logging's parse_file reads, line for line."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    from mlperf_review.parse import parse_log

    lines = make_lines(**V1_GBS64)
    acc = max(i for i, ln in enumerate(lines) if '"eval_accuracy"' in ln)
    lines[acc + 1] = lines[acc] + lines[acc + 1]  # the last eval_accuracy, then the next record, on one line
    del lines[acc]
    blk = next(i for i, ln in enumerate(lines) if '"block_start"' in ln)
    lines[blk] = lines[blk].replace(":::MLLOG ", ":::MLLOG", 1)
    stop = next(i for i, ln in enumerate(lines) if '"run_stop"' in ln)
    lines[stop] += " [rank1] hello"  # another process's text after the record: its JSON does not parse there
    path = write_log(tmp_path / "result_0.txt", lines=lines)
    loglines, _ = parse_file(str(path), ruleset="1.0.0")
    ours = parse_log(path)
    assert [e.key for e in ours.events] == [ll.key for ll in loglines]
    kinds = {i.kind for i in ours.issues}
    assert "interleaved" in kinds and "not-read" in kinds
