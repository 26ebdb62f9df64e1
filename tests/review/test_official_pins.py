"""Pins of what maskrcnn_benchmark/review/official.py relies on in mlperf-logging.

The package checker reports only through log records, so the review reads its verdict and details by their
format strings; the score explanation mirrors two private result_summarizer functions. If a new mlperf-logging
changes any of it, these tests fail and say which pin to update (and requirements.txt pins 4.1.68).
"""

import inspect
import json
import logging
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

from review_loggen import make_lines, write_log, write_runs  # noqa: E402

from mlperf_review import official, rules  # noqa: E402
from mlperf_review.parse import parse_lines  # noqa: E402

V1 = dict(ruleset="1.0.0", gbs=64, lr=0.08, epochs=13)


def test_version_is_the_pinned_one():
    assert official.version() == official.PINNED_VERSION, (
        "mlperf-logging changed: re-run tests/review and update the pins in maskrcnn_benchmark/review/official.py")


def test_rule_files_parse_the_same_with_libyaml_once_and_as_the_checker_reads_them():
    """The review parses the compliance checker's rule files once, with libyaml's base loader (official._RuleFiles):
    every rule file of mlperf-logging gives the same rules as the checker's own ``yaml.load(f, BaseLoader)``, the
    checker's only YAML call is that one, and a rule file changed on disk is parsed again."""
    import re

    import yaml
    from mlperf_logging.compliance_checker import mlp_compliance

    source = inspect.getsource(mlp_compliance)
    assert re.findall(r"yaml\.\w+\(.*\)", source) == ["yaml.load(f, Loader=yaml.BaseLoader)"]
    assert yaml.__with_libyaml__, "PyYAML without libyaml: the review parses rule files in Python (slower)"
    files = sorted(Path(mlp_compliance.__file__).parent.rglob("*.yaml"))
    assert len(files) > 50
    rule_files = official._RuleFiles(yaml)
    for path in files:
        with open(path) as f:
            try:
                want = yaml.load(f, Loader=yaml.BaseLoader)
            except yaml.YAMLError:  # a broken rule file of another benchmark: libyaml refuses it too
                with open(path) as g, pytest.raises(yaml.YAMLError):
                    rule_files.load(g, Loader=yaml.BaseLoader)
                continue
        for _ in range(2):  # parsed, then from the cache: an equal deep copy, not the cached object
            with open(path) as f:
                got = rule_files.load(f, Loader=yaml.BaseLoader)
            assert got == want, path
        if isinstance(got, list) and got:
            got.clear()
            with open(path) as f:
                assert rule_files.load(f, Loader=yaml.BaseLoader) == want, path
    with official.captured():
        assert mlp_compliance.yaml is not yaml
    assert mlp_compliance.yaml is yaml


def test_entry_point_signatures():
    from mlperf_logging.compliance_checker import mlp_compliance
    from mlperf_logging.package_checker import package_checker
    from mlperf_logging.rcp_checker import rcp_checker
    from mlperf_logging.result_summarizer import result_summarizer

    params = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert params(package_checker.check_training_package) == [
        "folder", "usage", "ruleset", "quiet", "werror", "rcp_bypass", "rcp_bert_train_samples",
        "seed_checker_bypass", "log_output"]
    assert params(result_summarizer.summarize_results)[:4] == ["folder", "usage", "ruleset", "csv_file"]
    assert params(mlp_compliance.make_checker) == ["usage", "ruleset", "quiet", "werror"]
    assert params(mlp_compliance.main) == ["filename", "config_file", "checker"]
    assert isinstance(mlp_compliance.enqueued_configs, list)
    assert "set_scaling" in params(rcp_checker.check_directory)


def _records(pkg, ruleset):
    from mlperf_logging.package_checker import package_checker

    with official.captured() as cap:
        package_checker.check_training_package(str(pkg.org_dir), "training", ruleset, False, False, False, False,
                                               False, "/dev/null")
    return {r.msg for r in cap.records}, cap.records


def _stage(folder, **kw):
    files = sorted(Path(folder).glob("result_*.txt"))
    return official.stage([(f.name, f) for f in files], "TESTORG", "1xTEST", kw.get("division", "closed"))


def test_package_checker_messages_of_an_accepted_folder(tmp_path):
    write_runs(tmp_path, [100, 101, 102, 103], **V1)
    write_log(tmp_path / "result_4.txt", ttt_min=90, seed=9, status="aborted", final_bbox=0.3, final_segm=0.3,
              **V1)
    with _stage(tmp_path) as pkg:
        msgs, records = _records(pkg, "1.0.0")
        for fmt in (official.PKG_PASSED, official.PKG_NONCOMPLIANT_ACCEPTED, official.SEED_RUNNING,
                    official.RCP_RUNNING, official.RCP_RECORD, official.RCP_SUBMISSION_MEAN, official.PKG_RCP_PASSED):
            assert fmt in msgs, fmt
        rec = next(r for r in records if r.msg == official.RCP_RECORD)
        assert isinstance(rec.args, dict) and {"BS", "RCP Mean", "Max Speedup"} <= set(rec.args)
        scaling = json.loads((pkg.benchmark_dir / official.SCALING_FILE).read_text())
        assert scaling == {"scaling_factor": pytest.approx(14 / 13)}
        check = official.run_package_checker(pkg, "1.0.0")
    assert check.passed is True and check.noncompliant_accepted and check.rcp_passed is True
    assert check.rcp_submission_mean == 13.0 and check.rcp_record["BS"] == 64
    assert check.scaling_factor == pytest.approx(14 / 13) and check.seeds_passed is True


def test_package_checker_messages_of_a_rejected_folder(tmp_path):
    """Six files, two of them not compliant, a seed used twice, converging too fast."""
    kw = dict(V1, epochs=9)
    write_runs(tmp_path, [100, 101, 102, 103], **kw)
    write_log(tmp_path / "result_4.txt", ttt_min=90, seed=1000, **kw)
    for i in (5, 6):
        write_log(tmp_path / f"result_{i}.txt", ttt_min=90, seed=50 + i, final_bbox=0.3, final_segm=0.3, **kw)
    with _stage(tmp_path) as pkg:
        msgs, _ = _records(pkg, "1.0.0")
        for fmt in (official.PKG_FAILED, official.PKG_FILE_COUNT, official.PKG_NONCOMPLIANT_REJECTED,
                    official.SEED_ERRORS, official.PKG_SEED_FAILED, official.PKG_RCP_FAILED):
            assert fmt in msgs, fmt
        check = official.run_package_checker(pkg, "1.0.0")
    assert check.passed is False and check.file_count == (7, 5) and check.noncompliant_rejected == 2
    assert check.seeds_passed is False and "result_4.txt logs seed 1000" in check.seed_errors[0]
    assert check.rcp_passed is False and check.other_errors == []


def test_system_description_matches_the_checker(tmp_path):
    """official.SYSTEM_DESC_FIELDS are exactly the fields system_desc_checker requires."""
    from mlperf_logging.system_desc_checker import system_desc_checker

    desc = official.system_description("ORG", "2xSYS", "closed", "onprem")
    assert list(desc) == list(official.SYSTEM_DESC_FIELDS)
    for rs in rules.SUPPORTED_RULESETS[1:]:
        path = tmp_path / "sys.json"
        path.write_text(json.dumps(desc))
        with official.captured():
            assert system_desc_checker.check_system_desc(str(path), "training", rs)[0] is True
    for missing in official.SYSTEM_DESC_FIELDS:
        path.write_text(json.dumps({k: v for k, v in desc.items() if k != missing}))
        with official.captured():
            assert system_desc_checker.check_system_desc(str(path), "training", "3.1.0")[0] is False, missing


def test_summarizer_columns_and_scaling(tmp_path):
    write_runs(tmp_path, [100, 101, 102, 103, 110], **V1)
    with _stage(tmp_path) as pkg:
        official.run_package_checker(pkg, "1.0.0")
        res = official.run_result_summarizer(pkg, "1.0.0")
    assert res.crash == "" and res.rcp == "Pass" and res.gbs == 64 and res.samples_to_converge == 13
    assert res.scaling_factor == pytest.approx(14 / 13) and res.score_min == pytest.approx(102 * 14 / 13)


def test_run_start_record_is_the_summarizers(tmp_path):
    """official.summarizer_start_stop == result_summarizer._query_run_start_stop on a multi-rank log."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer import result_summarizer

    lines = make_lines(ranks=3, rank_delay_ms=7000, ttt_min=50.0)
    path = write_log(tmp_path / "result_0.txt", lines=lines)
    theirs = result_summarizer._query_run_start_stop(parse_file(str(path), "3.1.0")[0])
    start, stop = official.summarizer_start_stop(parse_lines(lines).events)
    assert (start.time_ms, stop.time_ms) == theirs
    assert (stop.time_ms - start.time_ms) / 60000 == pytest.approx(50.0)


@pytest.mark.parametrize("scores,dropped", [([5, 1, 3, 2, 4], 0), ([1, 2, 3, 4], 1), ([1, 2, 3, 4, 5, 6], 0),
                                            ([3, 1, 2, 4], 0), ([1, 2, 3], 2), ([1, 2], 1)])
def test_olympic_is_the_summarizers(scores, dropped):
    from mlperf_logging.result_summarizer import result_summarizer

    theirs = result_summarizer._compute_olympic_average(list(scores), dropped, 1) if dropped <= 1 else None
    assert official.olympic(scores, dropped) == theirs


def test_captured_restores_logging():
    root = logging.getLogger()
    before = (root.handlers[:], root.level)
    with official.captured() as cap:
        logging.warning("inside")
        print("printed")
    assert (root.handlers, root.level) == before
    assert [r.getMessage() for r in cap.records] == ["inside"] and cap.stdout == "printed\n"


def test_rcp_lookup_helpers_still_answer_as_the_rcp_file_says():
    """official.RCPTable wraps RCP_Checker's private lookups (_find_rcp, _find_top_min_rcp, _find_bottom_max_rcp,
    _find_min_rcp); the recipe check reads the RCPs only through it. Compared with the RCP json itself, so a
    mlperf-logging that renames or changes them fails here, by name."""
    import mlperf_logging

    path = Path(mlperf_logging.__file__).parent / "rcp_checker" / "training_3.1.0" / "rcps_maskrcnn.json"
    data = json.loads(path.read_text())
    table = official.rcp_table("3.1.0")
    assert table.batches() == sorted(r["BS"] for r in data.values()) == [8, 48, 64, 96, 128, 256, 272]
    name, record = table.at(96)
    assert name == "maskrcnn_ref_96" and record["Hyperparams"] == data["maskrcnn_ref_96"]["Hyperparams"]
    assert table.at(100) is None
    # what the package checker judges convergence with: the pruned RCPs (package_checker.py passes
    # rcp_pass='pruned_rcps'), here 8, 128 and 272; 96 is interpolated between 8 and 128
    assert table.at(96, judged=True) is None and table.at(128, judged=True)[0] == "maskrcnn_ref_128"
    low, high = table.around(100)
    assert (low["BS"], high["BS"]) == (8, 128)
    assert table.smallest()["BS"] == 8
    low, high = table.around(300)
    assert high is None and low["BS"] == 272


def test_a_review_with_another_mlperf_logging_release_says_so(tmp_path, monkeypatch):
    """Verdicts are read from the official tools' messages, pinned on one release; the review extra installs
    mlperf-logging unpinned, and another release's wording gave a FAIL ("gave no verdict") without a word why."""
    from review_loggen import write_log

    from mlperf_review import official
    from mlperf_review.core import review_folder

    for i in range(5):
        write_log(tmp_path / f"result_{i}.txt", seed=i + 1)
    assert not any("is installed; this review reads" in w for w in review_folder(tmp_path).warnings)
    monkeypatch.setattr(official, "version", lambda: "5.0.0")
    warned = [w for w in review_folder(tmp_path).warnings if "is installed; this review reads" in w]
    assert warned and warned[0].startswith("mlperf-logging 5.0.0 is installed") and "==4.1.68" in warned[0]
