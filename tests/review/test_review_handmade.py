"""Review of generated logs: run facts, broken lines, prefixes, other files, rulesets, closed rules, plots, CLI.

The verdict and score cases are in test_review_differential.py (against the official tools)."""

import datetime as _dt
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from official_reference import official_answer  # noqa: E402
from review_loggen import make_lines, write_log, write_runs  # noqa: E402

from mlperf_review import report, review_folder  # noqa: E402
from mlperf_review.cli import main  # noqa: E402
from mlperf_review.parse import parse_lines  # noqa: E402
from mlperf_review.rules import closed_rule_warnings, detect_ruleset  # noqa: E402

TTTS = [100.0, 101.0, 102.0, 103.0, 110.0]


def by_name(review):
    return {r.name: r for r in review.runs}


# ------------------------------------------------------------------------------------------------ good runs
def test_five_good_runs(tmp_path):
    write_runs(tmp_path, TTTS)
    review = review_folder(tmp_path)
    assert review.verdict == "PASS", review.problems
    assert all(r.compliance.passed for r in review.runs)
    assert review.score.score_min == pytest.approx(102.0, abs=1e-9)
    assert review.score.dropped_fastest == "result_0" and review.score.dropped_slowest == "result_4"
    r0 = by_name(review)["result_0"]
    assert r0.epochs == 14 and r0.first_target_epoch == 14
    assert r0.init_min == pytest.approx(0.5, abs=0.01)
    assert r0.throughput_ips == pytest.approx(48 / 0.24)
    assert r0.throughput_source == "median images/s of the progress lines"
    text = report.render_text(review)
    assert "Package checker: PASS (mlperf-logging 4.1.68 package checker, ruleset 3.1.0)" in text
    assert "Newest ruleset" not in text  # 3.1.0 is the newest


# ------------------------------------------------------------------------------------------------ failures
def test_two_non_converged_runs_cli(tmp_path, capsys):
    write_runs(tmp_path, TTTS[:3])
    for i in (3, 4):
        write_log(tmp_path / f"result_{i}.txt", ttt_min=100.0 + i, seed=i, status="aborted", final_bbox=0.30,
                  final_segm=0.30)
    rc = main([str(tmp_path), "--no-write"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "no score: 2 runs do not count (result_3, result_4)" in out
    assert "Verdict: FAIL - 2 result files fail the compliance checker (result_3, result_4)" in out


def test_success_status_without_target_is_not_converged(tmp_path):
    write_log(tmp_path / "result_0.txt", final_bbox=0.36, final_segm=0.33, status="success")
    run = review_folder(tmp_path).runs[0]
    assert run.status == "not converged"
    assert "no eval_accuracy reached the target" in run.status_detail


def test_missing_run_stop(tmp_path):
    write_runs(tmp_path, TTTS[:4])
    write_log(tmp_path / "result_4.txt", run_stop=False, seed=99, epochs=9, final_bbox=0.33, final_segm=0.31)
    review = review_folder(tmp_path)
    run = by_name(review)["result_4"]
    assert run.status == "incomplete"
    assert "no run_stop" in run.status_detail and "epoch 9" in run.status_detail
    assert run.ttt_min is None and not run.scored
    assert run.compliance.passed is False
    assert any("run_stop" in e for e in run.compliance.errors)
    assert review.verdict == "PASS" and review.score.dropped_slowest == "result_4"
    text = report.render_text(review)
    assert "result_4: incomplete: no run_stop" in text


def test_aborted_but_compliant_run_is_counted_and_flagged(tmp_path):
    """result_summarizer counts a compliant run whatever its run_stop status; the review says so."""
    write_runs(tmp_path, TTTS[:4])
    write_log(tmp_path / "result_4.txt", ttt_min=99.0, seed=7, status="aborted")
    review = review_folder(tmp_path)
    assert by_name(review)["result_4"].scored and review.score.score_min == pytest.approx(101.0, abs=1e-9)
    assert any("result_4: run_stop has status 'aborted', yet result_summarizer counts its time" in w
               for w in review.warnings)


# ------------------------------------------------------------------------------------------------ broken lines
def test_truncated_line_reported_with_line_number(tmp_path):
    write_runs(tmp_path, TTTS[:4])
    lines = make_lines(ttt_min=TTTS[4], seed=77)
    idx = next(i for i, ln in enumerate(lines) if '"eval_accuracy"' in ln)
    lines[idx] = lines[idx][:70]  # cut in the middle of the JSON
    path = write_log(tmp_path / "result_4.txt", lines=lines)
    review = review_folder(tmp_path)
    run = by_name(review)["result_4"]
    lineno = idx + 2  # write_log adds one line before the records; line numbers are 1-based
    assert [(i.kind, i.lineno) for i in run.issues] == [("truncated", lineno)]
    assert str(run.issues[0]).startswith(f"result_4.txt:{lineno}: truncated")
    assert run.compliance.passed is False
    assert any("parsing errors" in e for e in run.compliance.errors)
    assert run.status == "converged"  # the rest of the log is still read
    # one broken log is accepted under olympic scoring, but the seed checker cannot read its seed: rejected
    assert review.package.noncompliant_accepted and review.verdict == "FAIL"
    assert review.problems == ["seed check failed: Error found when querying seeds from result_4.txt: Found parsing "
                               "errors: | ^^  Unterminated string starting at: line 1 column 59 (char 58) | Log lines "
                               "had parsing errors."]
    text = report.render_text(review)
    assert f"result_4.txt:{lineno}: truncated" in text
    assert path.exists()


def test_interleaved_line(tmp_path):
    lines = make_lines()
    idx = next(i for i, ln in enumerate(lines) if '"train_samples"' in ln)
    lines[idx] = lines[idx][:60] + "0: " + lines[idx + 1]  # two ranks writing at the same time
    write_log(tmp_path / "result_0.txt", lines=lines)
    run = review_folder(tmp_path).runs[0]
    kinds = {(i.kind, i.lineno) for i in run.issues}
    # the cut record before the second one is not read, as mlperf_logging's parser reads only a line's last
    # record (tests/review/test_review_differential.py): the line is named as two processes' output
    assert ("interleaved", idx + 2) in kinds and ("truncated", idx + 2) not in kinds


def test_parser_never_raises_on_garbage():
    lines = [":::MLLOG", ":::MLLOG []", ':::MLLOG {"key": "x"}', ':::MLLOG {"key": 1, "time_ms": 2}',
             ':::MLLOG {"key": "a", "time_ms": "zz"}', ':::MLLOG {"key": "a", "time_ms": 5} trailing',
             "\x00\xff binary", ':::MLLOG {"key": "ok", "time_ms": 1, "value": 3}']
    log = parse_lines(lines, "g.log")
    # line 6's record has text after its JSON: mlperf_logging's json.loads drops it, so does the review
    assert [e.key for e in log.events] == ["ok"]
    assert [i.lineno for i in log.issues] == [1, 2, 3, 4, 5, 6]


def test_prefixed_log_is_compliant(tmp_path):
    write_log(tmp_path / "result_0.txt", prefix="0: ")
    write_log(tmp_path / "result_1.txt", prefix="[1,0]<stdout>:", seed=5)
    review = review_folder(tmp_path)
    for run in review.runs:
        assert run.compliance.passed is True, run.compliance.errors
        assert run.status == "converged" and run.epochs == 14 and not run.issues
        assert len(run.train_points) == 28


def test_other_benchmark(tmp_path):
    """A log of another benchmark is still a result file for the official tools, and their compliance checker
    crashes on its eval_accuracy; the review shows the crash as the reason, in one line."""
    d = tmp_path / "d"
    write_runs(d, TTTS[:4])
    write_log(d / "result_4.txt", benchmark="ssd")
    review = review_folder(d)
    run = by_name(review)["result_4"]
    assert run.status == "wrong benchmark" and "'ssd' log" in run.status_detail
    assert any("not maskrcnn logs" in w for w in review.warnings)
    assert review.verdict == "FAIL"
    assert review.problems == ["the package checker stopped with TypeError: '>=' not supported between instances of "
                               "'dict' and 'float': the official tools cannot check this folder"]
    assert run.compliance.passed is False and "stopped with TypeError" in run.compliance.errors[0]
    with pytest.raises(TypeError):
        official_answer(d, tmp_path / "official", review.ruleset)


def test_gz_and_other_files(tmp_path):
    write_log(tmp_path / "result_0.txt.gz", seed=1)
    write_log(tmp_path / "result_1.txt.gz", seed=2, ttt_min=120.0)
    write_log(tmp_path / "result_2.txt", seed=3)
    write_log(tmp_path / "result_2.txt.gz", seed=4)
    write_log(tmp_path / "node0.log", seed=5)
    (tmp_path / "slurm.out").write_text("no mllog here\n")
    (tmp_path / "mlperf_review.md").write_text("an earlier review\n")
    review = review_folder(tmp_path)
    assert [r.name for r in review.runs] == ["result_0", "result_1", "result_2"]
    assert all(r.compliance.passed for r in review.runs)
    assert by_name(review)["result_1"].ttt_min == pytest.approx(120.0, abs=1e-9)
    assert by_name(review)["result_2"].seeds == [3]
    assert review.ignored == ["node0.log: not a result file: the official tools read result_*.txt only",
                              "result_2.txt.gz: result_2.txt is there too (the plain file is the result)",
                              "slurm.out: not a result file: the official tools read result_*.txt only"]


def _corrupt(data):
    """The deflate stream damaged a few bytes past the gzip header: zlib.error ("invalid code lengths set"), not
    the OSError or EOFError of a bad header or a truncated file."""
    damaged = bytearray(data)
    for i in range(12, 20):
        damaged[i] ^= 0x5A
    return bytes(damaged)


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_corrupt_gzip(tmp_path, damage):
    """A corrupted .gz (zlib.error) ended the review with "unexpected error while reviewing: Error -3 while
    decompressing data", naming no file."""
    good = tmp_path / "ok.txt.gz"
    write_log(good)
    data = good.read_bytes()
    (tmp_path / "result_0.txt.gz").write_bytes(data[: len(data) // 2] if damage == "truncated" else _corrupt(data))
    good.unlink()
    review = review_folder(tmp_path)
    run = review.runs[0]
    assert any(i.kind == "unreadable" and "result_0.txt.gz" in str(i) for i in run.issues), run.issues
    assert run.compliance.passed is False


# ------------------------------------------------------------------------------------------------ rulesets >= 1.0.0
def test_duplicate_seeds_fail(tmp_path):
    d = tmp_path / "d"
    for i, (ttt, seed) in enumerate(zip(TTTS, [7, 7, 8, 9, 10])):
        write_log(d / f"result_{i}.txt", ttt_min=ttt, seed=seed, ruleset="1.0.0", gbs=96, lr=0.12)
    review = review_folder(d)
    off = official_answer(d, tmp_path / "official", "1.0.0")
    assert review.verdict == off["verdict"] == "FAIL" and off["seeds_failed"]
    assert review.seeds.passed is False
    assert any("result_1.txt logs seed 7" in e for e in review.seeds.errors)
    assert review.seeds.duplicates == ["seed 7 used by result_0, result_1"]
    assert review.problems[0].startswith("seed check failed: Result file result_1.txt logs seed 7")


def test_a_shared_seed_the_official_check_lets_pass_is_not_called_distinct(tmp_path):
    """mlperf-logging's seed check rejects a seed logged twice from the same source line only: two runs logging
    seed 7 from tools/train.py and /workspace/tools/train.py pass it. The review listed the shared seed and still
    printed "PASS: every run logs its own seed"."""
    import re

    d = tmp_path / "d"
    for i, (ttt, seed) in enumerate(zip(TTTS, [7, 7, 8, 9, 10])):
        write_log(d / f"result_{i}.txt", ttt_min=ttt, seed=seed, ruleset="1.0.0", gbs=96, lr=0.12)
    one = d / "result_1.txt"
    one.write_text(re.sub(r'("key": "seed".*?"file": ")([^"]*)"', r'\1/workspace/\2"', one.read_text()))
    review = review_folder(d)
    off = official_answer(d, tmp_path / "official", "1.0.0")
    assert not off["seeds_failed"] and review.seeds.passed is True  # the official verdict, as it is
    assert review.seeds.duplicates == ["seed 7 used by result_0, result_1"]
    line = report.seed_line(review)
    assert "every run logs its own seed" not in line
    assert line == ("PASS (mlperf-logging's check: no seed logged twice from one source line); note: seed 7 used "
                    "by result_0, result_1")


def test_ruleset_detected_from_the_date_and_forced(tmp_path):
    write_log(tmp_path / "result_0.txt", ruleset="2.1.0", gbs=96, lr=0.12)
    review = review_folder(tmp_path)
    assert review.ruleset == "2.1.0" and review.runs[0].compliance.passed is True
    assert review.ruleset_reason.startswith("detected from the date: log dated 2022-09-24")
    forced = review_folder(tmp_path, ruleset="0.7.0")
    assert forced.ruleset == "0.7.0" and forced.runs[0].compliance.ruleset == "0.7.0"


def test_detect_ruleset():
    day = lambda y, m, d: _dt.datetime(y, m, d, 12, tzinfo=_dt.timezone.utc).timestamp() * 1000  # noqa: E731
    assert detect_ruleset(day(2020, 6, 21))[0] == "0.7.0"
    assert detect_ruleset(day(2020, 7, 30))[0] == "1.0.0"
    assert detect_ruleset(day(2021, 5, 3))[0] == "1.0.0"
    assert detect_ruleset(day(2021, 9, 30))[0] == "1.1.0"
    assert detect_ruleset(day(2022, 5, 1))[0] == "2.0.0"
    assert detect_ruleset(day(2022, 9, 24))[0] == "2.1.0"
    assert detect_ruleset(day(2023, 5, 13))[0] == "3.0.0"   # NVIDIA's v3.x H100 logs
    assert detect_ruleset(day(2023, 9, 29))[0] == "3.1.0"
    assert detect_ruleset(day(2025, 1, 1)) == ("3.1.0", "log dated 2025-01-01, after the last Mask R-CNN round 3.1.0")
    assert detect_ruleset(None)[0] == "3.1.0"


# ------------------------------------------------------------------------------------------------ closed rules
def test_closed_hyperparameter_warnings(tmp_path):
    write_log(tmp_path / "result_0.txt", lr=0.05, decay_factor=0.2, num_image_candidates=1500)
    review = review_folder(tmp_path)
    text = " ".join(review.hparam_warnings)
    assert "opt_base_learning_rate 0.05 is not 0.02*K" in text
    assert "opt_learning_rate_decay_factor 0.2 is not 0.1" in text
    assert "num_image_candidates 1500 is not a multiple of 1000" in text
    assert review.runs[0].compliance.passed is False  # the checker agrees


def test_closed_rule_function():
    good = {"opt_base_learning_rate": 0.12, "opt_learning_rate_decay_factor": 0.1, "num_image_candidates": 6000,
            "opt_learning_rate_decay_steps": [12000, 16000], "min_image_size": 800, "max_image_size": 1333,
            "global_batch_size": 96}
    assert closed_rule_warnings(good, "0.7.0") == []
    small = dict(good, global_batch_size=8, opt_base_learning_rate=0.01, num_image_candidates=1000,
                 opt_learning_rate_decay_steps=[144000, 192000])
    assert closed_rule_warnings(small, "2.0.0") == []
    assert len(closed_rule_warnings(small, "1.0.0")) == 1
    assert closed_rule_warnings(dict(good, min_image_size=640), "0.7.0") == [
        "min_image_size 640 is not 800 (fixed in the closed division)"]


def test_values_no_number_makes_are_warnings_not_a_crash(tmp_path):
    """mllog writes a float nan as NaN and inf as Infinity; a decay step may be null. Each raised inside the rule
    check (ValueError, OverflowError, TypeError) and the review ended with "unexpected ... while reviewing",
    naming neither the file nor the key."""
    base = {"opt_base_learning_rate": 0.12, "opt_learning_rate_decay_factor": 0.1, "num_image_candidates": 6000,
            "opt_learning_rate_decay_steps": [12000, 16000], "global_batch_size": 96}
    nan, inf = float("nan"), float("inf")
    assert closed_rule_warnings(dict(base, num_image_candidates=nan), "1.0.0") == [
        "num_image_candidates nan is not a multiple of 1000"]
    assert closed_rule_warnings(dict(base, opt_base_learning_rate=inf), "1.0.0") == [
        "opt_base_learning_rate inf is not a positive number"]
    assert closed_rule_warnings(dict(base, opt_learning_rate_decay_steps=[None, None]), "1.0.0") == [
        "opt_learning_rate_decay_steps [None, None] is not two iteration numbers"]
    assert closed_rule_warnings(dict(base, global_batch_size=inf), "1.0.0") == ["global_batch_size inf is not a "
                                                                                "positive number"]
    write_log(tmp_path / "result_0.txt", lr=inf, num_image_candidates=nan)
    text = (tmp_path / "result_0.txt").read_text(encoding="latin-1")
    assert "Infinity" in text and "NaN" in text  # as mllog's json.dumps writes them
    review = review_folder(tmp_path)
    assert "opt_base_learning_rate inf is not a positive number" in " ".join(review.hparam_warnings)


def test_rules_reviewers_check_by_hand():
    """training_rules.adoc's hyperparameter table marks two Mask R-CNN rules "check manually": decay steps
    (60000, 80000) x (1 + K/10) x 16 / global batch for an integer K, and num_image_candidates 1000 (or 2000,
    before 2.1.0) or 1000 x images per chip. Examples are NVIDIA's v0.7 recipes (K = 2 at 48..128, K = 5 at 256)."""
    base = {"opt_base_learning_rate": 0.16, "opt_learning_rate_decay_factor": 0.1, "num_image_candidates": 4000,
            "opt_learning_rate_decay_steps": [9000, 12000], "global_batch_size": 128}
    assert closed_rule_warnings(base, "1.0.0", images_per_chip=4) == []
    assert closed_rule_warnings(dict(base, global_batch_size=256, opt_learning_rate_decay_steps=[5625, 7500],
                                     num_image_candidates=1000), "0.7.0") == []
    off = closed_rule_warnings(dict(base, opt_learning_rate_decay_steps=[9100, 12000]), "1.0.0")
    assert off == ["opt_learning_rate_decay_steps [9100, 12000] is not (60000, 80000) x (1 + K/10) x 16 / "
                   "global_batch_size 128 for an integer K (K=2: [9000, 12000])"]
    # the same K for both steps
    assert len(closed_rule_warnings(dict(base, opt_learning_rate_decay_steps=[9000, 12500]), "2.1.0")) == 1
    # not applied from 3.0.0: NVIDIA's accepted v3.0 8-node recipe (6125, 8000 at 256) does not meet it
    assert closed_rule_warnings(dict(base, global_batch_size=256, opt_learning_rate_decay_steps=[6125, 8000],
                                     num_image_candidates=1000), "3.0.0") == []
    assert closed_rule_warnings(dict(base, num_image_candidates=7000), "1.0.0", images_per_chip=4) == [
        "num_image_candidates 7000 is not 1000 or 2000 or 1000 x images per chip (4 images per chip: 4000)"]
    assert closed_rule_warnings(dict(base, num_image_candidates=2000), "1.0.0", images_per_chip=4) == []
    assert len(closed_rule_warnings(dict(base, num_image_candidates=2000), "2.1.0", images_per_chip=4)) == 1
    # from a log alone the chips are unknown (the RCP records log 6000 at batch 64): only a positive multiple of 1000
    assert closed_rule_warnings(dict(base, num_image_candidates=7000), "1.0.0") == []
    assert closed_rule_warnings(dict(base, num_image_candidates=0), "1.0.0") == ["num_image_candidates 0 is not "
                                                                                 "positive"]
    # no K makes steps at iteration 0 (K = -10); the hint names the smallest K with steps
    assert closed_rule_warnings(dict(base, opt_learning_rate_decay_steps=[0, 0]), "1.0.0") == [
        "opt_learning_rate_decay_steps [0, 0] is not (60000, 80000) x (1 + K/10) x 16 / global_batch_size 128 for an "
        "integer K (K=-9: [750, 1000])"]


@pytest.mark.parametrize("ruleset", ["1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0"])
def test_every_rcp_meets_the_decay_step_rule(ruleset):
    """The oracle: mlperf-logging's RCP records (the recipes the working group accepted) for the rulesets where the
    decay-step rule is applied."""
    import mlperf_logging

    from mlperf_review.rules import decay_steps_k

    path = Path(mlperf_logging.__file__).parent / "rcp_checker" / f"training_{ruleset}" / "rcps_maskrcnn.json"
    records = json.loads(path.read_text()).values()
    assert records
    for r in records:
        assert decay_steps_k(r["Hyperparams"]["opt_learning_decay_steps"], r["BS"]) is not None, r
        # and no closed-rule warning from what a log of that recipe would say
        hparams = {"global_batch_size": r["BS"], "opt_base_learning_rate": r["Hyperparams"]["opt_base_learning_rate"],
                   "opt_learning_rate_decay_steps": r["Hyperparams"]["opt_learning_decay_steps"],
                   "num_image_candidates": r["Hyperparams"]["num_image_candidates"]}
        assert closed_rule_warnings(hparams, ruleset) == [], r


def test_a_run_whose_cache_was_not_flushed_is_named(tmp_path):
    """The compliance checker only asks that cache_clear is logged; the rules ask for the cache flushed before every
    run, so a log saying false (a job that could not drop the caches) is named, and the checker's verdict is
    unchanged."""
    write_runs(tmp_path, TTTS)
    write_log(tmp_path / "result_2.txt", ttt_min=TTTS[2], seed=2, cache_clear=False)
    review = review_folder(tmp_path)
    named = [w for w in review.warnings if "cache_clear" in w]
    assert named == ["result_2: cache_clear is False: the rules require the cache flushed before every run (the "
                     "compliance checker only checks that the key is logged)"]
    assert review.runs[2].compliance.passed


def test_a_resumed_run_is_named(tmp_path):
    """A run resumed from a checkpoint (--resume) logs init and run_start anew and starts at a later epoch: the
    compliance checker passes it, but its time to train leaves out the training before the restart."""
    write_runs(tmp_path, TTTS)
    write_log(tmp_path / "result_3.txt", ttt_min=TTTS[3], seed=3, first_epoch=6)
    review = review_folder(tmp_path)
    named = [w for w in review.warnings if "resumed" in w]
    assert named == ["result_3: its first epoch is 6 (block_start first_epoch_num): a run resumed from a "
                     "checkpoint, timed from the restart: not a valid result (the compliance checker does not "
                     "check this)"]
    assert review.runs[3].compliance.passed and review.runs[3].first_epoch == 6
    assert [r.first_epoch for r in review.runs if r.name != "result_3"] == [1, 1, 1, 1]


def test_a_run_resumed_inside_its_first_epoch_is_named(tmp_path):
    """Resumed from a checkpoint inside epoch 1 (any CHECKPOINT_PERIOD below an epoch's iterations), a run's first
    epoch is 1 and nothing but its first block said it was resumed: it passed for a fresh result. The trainer logs
    the checkpoint's iteration in run_start's metadata (the compliance checker passes it, as checked here), and the
    review names the run."""
    write_runs(tmp_path, TTTS)
    write_log(tmp_path / "result_3.txt", ttt_min=TTTS[3], seed=3, resumed_from=300)
    review = review_folder(tmp_path)
    named = [w for w in review.warnings if "resumed" in w]
    assert named == ["result_3: resumed from a checkpoint at iteration 300 (run_start resumed_from_iteration), "
                     "timed from the restart: not a valid result (the compliance checker does not check this)"]
    assert review.runs[3].compliance.passed and review.runs[3].first_epoch == 1


def test_open_division_skips_closed_rules(tmp_path):
    write_log(tmp_path / "result_0.txt", lr=0.05, division="open")
    review = review_folder(tmp_path)
    assert review.division == "open" and review.hparam_warnings == []


# ------------------------------------------------------------------------------------------------ plot data
def test_plot_data_matches_logged_series(tmp_path):
    write_runs(tmp_path, TTTS[:2])
    review = review_folder(tmp_path)
    outputs = report.write_review_outputs(review, tmp_path / "out")
    png = Path(outputs["png"])
    assert png.stat().st_size > 5000
    data = review.plot_data
    r0 = by_name(review)["result_0"]
    xs, ys = data["BBOX AP per epoch"]["result_0"]
    assert xs == list(range(1, 15)) and ys[-1] == pytest.approx(0.379)
    xs, ys = data["SEGM AP per epoch"]["result_1"]
    assert ys[-1] == pytest.approx(0.344)
    assert data["SEGM AP per epoch"]["target 0.339"][1] == [0.339, 0.339]
    tx, ty = data["BBOX AP vs time since run_start"]["result_0"]
    assert tx == pytest.approx([e.minutes for e in r0.evals]) and tx[-1] < 100.0
    lx, ly = data["training loss"]["result_0"]
    assert lx == [p.iteration for p in r0.train_points] and ly == [p.loss for p in r0.train_points]
    assert data["training throughput per iteration"]["result_0"][1] == pytest.approx([200.0] * 28)


def test_plot_without_training_lines_uses_epoch_times(tmp_path):
    write_log(tmp_path / "result_0.txt", train_lines=False)
    review = review_folder(tmp_path)
    report.write_review_outputs(review, tmp_path)
    assert "training loss" not in review.plot_data
    xs, ys = review.plot_data["epoch duration"]["result_0"]
    assert xs == list(range(1, 15)) and all(y > 0 for y in ys)


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_writes_outputs_and_compare(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_runs(a, TTTS)
    write_runs(b, [50, 51, 52, 53, 54], gbs=64, lr=0.08)
    rc = main([str(a), "--compare", str(b)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Verdict: PASS" in out and "Comparison (A =" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("score (min)"))
    assert row.split()[2:] == ["102.00", "52.00", "0.510"]
    assert "Package checker: PASS" in out
    review = tmp_path / "a_review"  # beside the results: the results folder keeps only its result files
    for name in (report.MD_NAME, report.JSON_NAME, report.PNG_NAME, report.COMPARE_MD_NAME,
                 report.COMPARE_JSON_NAME):
        assert (review / name).stat().st_size > 0
    assert sorted(p.name for p in a.iterdir()) == [f"result_{i}.txt" for i in range(5)]
    data = json.loads((review / report.COMPARE_JSON_NAME).read_text())
    assert data["a"]["score_min"] == pytest.approx(102.0) and data["b"]["global_batch_size"] == 64
    assert json.loads((review / report.JSON_NAME).read_text())["verdict"] == "PASS"


def test_cli_json(tmp_path, capsys):
    write_runs(tmp_path, TTTS)
    assert main([str(tmp_path), "--json", "--no-write"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["score"]["score_min"] == pytest.approx(102.0) and len(data["runs"]) == 5
    assert not list(tmp_path.glob("mlperf_review*"))


@pytest.mark.parametrize("case", ["missing", "empty", "no_mllog", "a_file"])
def test_cli_bad_input(tmp_path, capsys, case):
    target = tmp_path / "d"
    if case == "empty":
        target.mkdir()
    elif case == "no_mllog":
        target.mkdir()
        (target / "result_0.log").write_text("hello\n")
        (target / "x.log.gz").write_bytes(gzip.compress(b"nothing\n"))
    elif case == "a_file":
        target.write_text("x")
    assert main([str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err


def test_cli_rejects_retired_ruleset(tmp_path, capsys):
    write_runs(tmp_path, TTTS[:1])
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--ruleset", "4.0.0"])
    assert exc.value.code == 2
    assert "invalid choice: '4.0.0'" in capsys.readouterr().err
    with pytest.raises(Exception, match="retired after 3.1.0"):
        review_folder(tmp_path, ruleset="4.0.0")


@pytest.mark.slow
def test_entry_points_without_torch(tmp_path):
    """tools/review_logs.py and -m both run as plain processes, and never import torch."""
    write_runs(tmp_path, TTTS)
    code = ("import sys, runpy; sys.argv=['review', %r, '--no-write', '--no-plot'];"
            "import mlperf_review.cli as c; rc=c.main(sys.argv[1:]);"
            "print('TORCH' if 'torch' in sys.modules else 'NOTORCH'); sys.exit(rc)") % str(tmp_path)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("NOTORCH")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "review_logs.py"), str(tmp_path / "nope")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: results folder not found")
    assert "Traceback" not in p.stderr
    for module in ("mlperf_review", "maskrcnn_benchmark.review"):  # the package, and its former name
        p = subprocess.run([sys.executable, "-m", module, str(tmp_path / "nope")], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.startswith("error: results folder not found"), (module, p.stderr)


def test_cli_unwritable_output_still_prints(tmp_path, capsys):
    write_runs(tmp_path, TTTS)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main([str(tmp_path), "--out", str(blocker / "sub"), "--no-plot"])
    cap = capsys.readouterr()
    assert rc == 2 and "Verdict: PASS" in cap.out
    assert cap.err.startswith("error: cannot write the review files") and len(cap.err.strip().splitlines()) == 1


def test_progress_iterations_that_restart_are_plotted_monotonic(tmp_path):
    """Finding 7 for progress lines: an iteration counter that restarts continues instead of drawing back."""
    lines = make_lines(epochs=3)
    k = 0
    for i, ln in enumerate(lines):
        if " iter: " in ln:
            k += 1
            lines[i] = ln.replace(ln.split(" iter: ")[1].split()[0], str(10 * (1 + (k - 1) % 2)), 1)
    write_log(tmp_path / "result_0.txt", lines=lines)
    review = review_folder(tmp_path)
    report.write_review_outputs(review, tmp_path / "out")
    xs, _ = review.plot_data["training throughput per iteration"]["result_0"]
    assert xs == [10, 20, 30, 40, 50, 60]
