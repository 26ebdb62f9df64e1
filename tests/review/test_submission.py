"""python -m mlperf_review submission: the submission folder, checked by mlperf-logging on that folder."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from review_loggen import write_log

from mlperf_review import submission
from mlperf_review.cli import main

RCP96 = dict(ruleset="3.1.0", gbs=96, lr=0.12, warmup_steps=625, warmup_factor=0.000192,
             decay_steps=(12000, 16000), num_image_candidates=6000, platform="4xDGXH100", org="TESTORG")


def five_runs(folder, epochs=(14, 15, 14, 14, 15), **kw):
    for i, e in enumerate(epochs):
        write_log(folder / f"result_{i}.txt", epochs=e, ttt_min=20.0 + i, seed=4000 + i, **{**RCP96, **kw})
    return folder


@pytest.mark.slow  # copies the implementation with git ls-files
def test_assembled_folder_is_what_the_package_checker_accepts(tmp_path, capsys):
    results = five_runs(tmp_path / "results")
    (results / "trial_0").mkdir()  # what a job leaves beside its result files (the trainer's OUTPUT_DIRs)
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"host_processor_model_name": "Intel Xeon Platinum 8480C", "cooling": "air"}))
    out = tmp_path / "submission"
    rc = main(["submission", str(results), "--out", str(out), "--system-json", str(site)])
    text = capsys.readouterr().out
    assert rc == 0, text
    org = out / "TESTORG"
    bench = org / "results" / "4xDGXH100" / "maskrcnn"
    # the RCP check writes scaling.json when the runs converge more slowly than the RCP (the summarizer reads it)
    assert sorted(p.name for p in bench.iterdir() if p.name != "scaling.json") == [f"result_{i}.txt"
                                                                                  for i in range(5)]
    desc = json.loads((org / "systems" / "4xDGXH100.json").read_text())
    from mlperf_logging.system_desc_checker import system_desc_checker

    valid, name, _, _ = system_desc_checker.check_system_desc(str(org / "systems" / "4xDGXH100.json"),
                                                              "training", "3.1.0")
    assert valid and name == "4xDGXH100"
    assert (desc["submitter"], desc["number_of_nodes"], desc["accelerators_per_node"], desc["cooling"]) == \
        ("TESTORG", "4", "8", "air")
    assert desc["host_processor_model_name"] == "Intel Xeon Platinum 8480C"
    impl = org / "benchmarks" / "maskrcnn" / "implementations" / submission.IMPLEMENTATION
    assert (impl / "run_and_time.sh").is_file() and (impl / "maskrcnn_benchmark" / "engine" / "run.py").is_file()
    assert "package checker (3.1.0, on this folder): PASS" in text and "result summarizer score:" in text
    assert "still 'TO FILL'" in text and "host_memory_capacity" in text
    assert (out / "review" / "4xDGXH100" / "mlperf_review.md").is_file()
    assert not list((org / "results").rglob("mlperf_review*"))


@pytest.mark.slow
def test_official_package_checker_command_agrees(tmp_path):
    """Differential: mlperf-logging's own command line on the assembled folder says SUCCESS too; a folder with a
    run removed fails in both."""
    out = tmp_path / "submission"
    a = submission.assemble(five_runs(tmp_path / "results"), out, copy_code=False, write_review=False)
    r = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(out / "TESTORG"), "training",
                        "3.1.0", "--log_output", str(tmp_path / "pc.log")], capture_output=True, text=True,
                       timeout=300)
    assert a.passed and "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in r.stdout + r.stderr
    four = five_runs(tmp_path / "four")
    (four / "result_4.txt").unlink()
    b = submission.assemble(four, tmp_path / "submission4", copy_code=False, write_review=False)
    r = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(tmp_path / "submission4" /
                        "TESTORG"), "training", "3.1.0", "--log_output", str(tmp_path / "pc2.log")],
                       capture_output=True, text=True, timeout=300)
    assert not b.passed and "PACKAGE CHECKER FOUND ERRORS" in r.stdout + r.stderr


def test_runs_of_another_submitter_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLPERF_SUBMISSION_ORG", raising=False)
    results = five_runs(tmp_path / "results")
    rc = main(["submission", str(results), "--out", str(tmp_path / "s"), "--org", "OtherOrg", "--no-implementation"])
    err = capsys.readouterr().err
    assert rc == 2 and "not logged by submitter 'OtherOrg'" in err and "result_0 says 'TESTORG'" in err


@pytest.mark.slow  # the official checkers on a folder
def test_an_existing_submission_is_never_overwritten(tmp_path, capsys):
    """Other runs into a system's folder are refused; the same runs again are checked again, their files as they
    were (a first build the summarizer could not score is finished by a second one with --system-json: it was
    refused as 'already holds files', and the folder had to be removed by hand)."""
    results = five_runs(tmp_path / "results", platform="2xMyCluster-H100")
    out = tmp_path / "s"
    assert main(["submission", str(results), "--out", str(out), "--no-implementation"]) == 1  # no node counts
    assert "result summarizer: no score" in capsys.readouterr().out
    bench = out / "TESTORG" / "results" / "2xMyCluster-H100" / "maskrcnn"
    before = {p.name: p.read_bytes() for p in bench.glob("result_*.txt")}
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"host_processors_per_node": 2, "accelerators_per_node": 8}))
    assert main(["submission", str(results), "--out", str(out), "--no-implementation", "--system-json",
                 str(site)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in bench.glob("result_*.txt")} == before
    write_log(results / "result_2.txt", epochs=15, ttt_min=21.5, seed=4999, **{**RCP96, "platform": "2xMyCluster-H100"})
    assert main(["submission", str(results), "--out", str(out), "--no-implementation"]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in bench.glob("result_*.txt")} == before


@pytest.mark.slow  # the official checkers on a folder
@pytest.mark.parametrize("site,needle", [
    ({"division": "open"}, "division"), ({"submitter": "Acme"}, "submitter"),
    ({"system_name": "Other"}, "system_name"), ({"status": "cloud"}, "status"), ([1], "not a JSON object"),
    ("missing", "cannot read"), ({"host_networking_topology": None}, "host_networking_topology (NoneType)")])
def test_a_site_description_that_contradicts_the_runs_is_refused_before_anything_is_written(tmp_path, capsys, site,
                                                                                             needle):
    """--system-json replaced the division, submitter, system name and status the runs logged, without a word (an
    'open' division turns the checker's seed and RCP checks off); a file holding no object was a traceback; a list
    was written as its Python repr; and a bad file left the results copied in, so that the corrected command was
    refused."""
    results = five_runs(tmp_path / "results")
    path = tmp_path / "site.json"
    if site != "missing":
        path.write_text(json.dumps(site))
    out = tmp_path / "s"
    rc = main(["submission", str(results), "--out", str(out), "--no-implementation", "--system-json", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and str(path) in err[0], err
    assert not list(out.rglob("result_*.txt"))


@pytest.mark.slow  # the official checkers on a folder
def test_a_description_as_nvidia_publishes_them_is_taken(tmp_path):
    """NVIDIA's published system descriptions hold a JSON object (other_software_stack) and name the system as
    the runs log it ('1xNVIDIA DGX A100', with its spaces): mlperf-logging's system-description checker takes
    them, and the reviewer refused both (a field neither text nor a number; a system_name 'contradicting' the
    runs' folder name '1xNVIDIA_DGX_A100'). Lists and objects are written as JSON."""
    results = five_runs(tmp_path / "results", platform="1xNVIDIA DGX A100")
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"system_name": "1xNVIDIA DGX A100", "other_software_stack": {
        "cuda_version": "11.0", "nccl_version": "2.7.5"}, "host_networking_topology": ["fat tree", "rail"]}))
    a = submission.assemble(results, tmp_path / "s", system_json=str(site), copy_code=False, write_review=False)
    desc = json.loads(a.system_json.read_text())
    assert desc["other_software_stack"] == {"cuda_version": "11.0", "nccl_version": "2.7.5"}
    assert desc["host_networking_topology"] == ["fat tree", "rail"]
    assert a.package.passed is True, submission.render(a)


@pytest.mark.slow  # the official checkers on a folder
def test_an_empty_result_file_is_left_to_the_checker(tmp_path):
    """A killed run's empty result file beside four good ones: the package checker accepts the set under olympic
    scoring (one run may fail), and the reviewer said "no submitter" (the empty file names none) before asking it."""
    results = five_runs(tmp_path / "results")
    (results / "result_4.txt").write_text("")
    a = submission.assemble(results, tmp_path / "s", copy_code=False, write_review=False)
    r = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(tmp_path / "s" / "TESTORG"),
                        "training", "3.1.0", "--log_output", str(tmp_path / "pc.log")], capture_output=True, text=True,
                       timeout=300)
    assert a.package.passed is ("PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in r.stdout + r.stderr), r.stdout


@pytest.mark.slow  # the official checkers on a folder
def test_the_description_keeps_the_sites_values_and_fills_only_what_the_runs_say(tmp_path, capsys):
    """The site's numbers are written as text (what the system-description checker joins); the framework is the
    site's to say (it was the reviewer's own torch, not the image's that ran); the same value as the runs' is
    accepted."""
    results = five_runs(tmp_path / "results")
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"division": "closed", "host_processor_core_count": 56, "cooling": "liquid"}))
    a = submission.assemble(results, tmp_path / "s", system_json=str(site), copy_code=False, write_review=False)
    desc = json.loads(a.system_json.read_text())
    assert (desc["host_processor_core_count"], desc["cooling"], desc["division"]) == ("56", "liquid", "closed")
    assert desc["framework"] == submission.TO_FILL and "framework" in a.to_fill
    assert a.package.passed is True, submission.render(a)


@pytest.mark.slow  # the official checkers on a folder
def test_runs_of_mixed_divisions_are_refused_and_mixed_rounds_are_named(tmp_path, capsys):
    """Closed and open runs became one 'closed' submission (the first name in sorted order); runs dated for two
    rounds passed without the warning the plain review gives, and the review file said the round was given with
    --ruleset."""
    results = five_runs(tmp_path / "results")
    write_log(results / "result_1.txt", epochs=15, ttt_min=21.0, seed=4001, **{**RCP96, "division": "open"})
    rc = main(["submission", str(results), "--out", str(tmp_path / "s"), "--no-implementation"])
    err = capsys.readouterr().err
    assert rc == 2 and "division" in err and "result_1" in err, err
    results = five_runs(tmp_path / "results2")
    write_log(results / "result_4.txt", epochs=15, ttt_min=24.0, seed=4004, **{**RCP96, "ruleset": "2.1.0"})
    a = submission.assemble(results, tmp_path / "s2", copy_code=False)
    assert any("different rounds" in w and "result_4: 2.1.0" in w for w in a.warnings), a.warnings
    review = (a.review_dir / "mlperf_review.md").read_text()
    assert "given with --ruleset" not in review


def test_platform_names_give_counts_only_for_systems_known_by_name():
    """Every name with 'DGX' in it was taken for 8 GPUs and 2 CPUs: a DGX-2 has 16 GPUs, a DGX Station A100 4
    GPUs and 1 CPU."""
    known = submission._known_from_platform
    assert known("1xDGX-2H")["accelerators_per_node"] == "16"
    assert known("2xNVIDIA DGX-2")["accelerators_per_node"] == "16"
    assert (known("1xDGX Station A100")["accelerators_per_node"], known("1xDGX Station A100")[
        "host_processors_per_node"]) == ("4", "1")
    assert known("8xDGXA100") == {"number_of_nodes": "8", "host_processors_per_node": "2",
                                  "accelerators_per_node": "8"}
    assert known("1xDGX-Foo") == {"number_of_nodes": "1"}


@pytest.mark.slow  # the official checkers on a folder
def test_staged_results_are_readable_as_the_umask_makes_files(tmp_path, capsys):
    """A result file of mode 0600 (a private LOGDIR) kept it in the submission folder."""
    import os

    results = five_runs(tmp_path / "results")
    for p in results.glob("result_*.txt"):
        p.chmod(0o600)
    a = submission.assemble(results, tmp_path / "s", copy_code=False, write_review=False)
    umask = os.umask(0)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in a.results} == {0o666 & ~umask}


@pytest.mark.slow  # the official checkers on a folder
def test_the_verdict_follows_the_official_checker(tmp_path, capsys):
    """Two non-converged runs sink the set: the checker on the real folder says so."""
    results = five_runs(tmp_path / "results")
    for i in (1, 3):
        write_log(results / f"result_{i}.txt", epochs=14, ttt_min=30.0, seed=4100 + i, final_bbox=0.30,
                  status="aborted", **RCP96)
    rc = main(["submission", str(results), "--out", str(tmp_path / "s"), "--no-implementation"])
    out = capsys.readouterr().out
    assert rc == 1 and "package checker (3.1.0, on this folder): FAIL" in out


@pytest.mark.slow  # two submissions with the official checkers: 1.7 s, kept out of make test-fast
def test_a_result_file_that_cannot_be_copied_leaves_no_half_built_folder(tmp_path, capsys):
    """A truncated result_3.txt.gz was a traceback that left result_0..2 and an empty result_3.txt behind, and the
    next attempt was refused as an existing submission ("never overwritten"); --out under a regular file was a
    traceback too."""
    import gzip

    results = five_runs(tmp_path / "results")
    blob = gzip.compress((results / "result_3.txt").read_bytes())
    (results / "result_3.txt").unlink()
    out = tmp_path / "s"
    damaged = bytearray(blob)
    for i in range(12, 20):  # the deflate stream: zlib.error, a traceback (neither OSError nor EOFError)
        damaged[i] ^= 0x5A
    for bad in (blob[: len(blob) // 2], bytes(damaged)):
        (results / "result_3.txt.gz").write_bytes(bad)
        rc = main(["submission", str(results), "--out", str(out), "--no-implementation"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "result_3.txt.gz" in err[0], err
        assert not list(out.rglob("result_*.txt"))
    (results / "result_3.txt.gz").write_bytes(blob)  # mended: the next attempt is not refused
    assert main(["submission", str(results), "--out", str(out), "--no-implementation"]) == 0
    capsys.readouterr()
    import os

    umask = os.umask(0)
    os.umask(umask)
    staged = next(out.rglob("result_0.txt")).parent
    assert staged.stat().st_mode & 0o777 == 0o777 & ~umask  # as mkdir makes a folder (mkdtemp's is 0700)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["submission", str(results), "--out", str(blocker / "s"), "--no-implementation"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(blocker) in err[0], err


@pytest.mark.slow  # three passes of the official checkers
def test_a_second_system_in_one_folder_gets_its_own_verdict_and_score(tmp_path, capsys):
    """Two systems assembled into one --out: the second one's verdict was the package checker's on the whole
    folder (the first system's failure) and its score the summarizer's first row (the first system's). Each
    system gets the official tools' answer for itself (differential: the summarizer's row for that system on
    the whole folder), and its own review folder."""
    from mlperf_logging.result_summarizer import result_summarizer

    bad = five_runs(tmp_path / "bad")
    for i in (1, 3):
        write_log(bad / f"result_{i}.txt", epochs=14, ttt_min=30.0, seed=4100 + i, final_bbox=0.30,
                  status="aborted", **RCP96)
    good = five_runs(tmp_path / "good", epochs=(14, 14, 14, 15, 15))
    out = tmp_path / "s"
    a_bad = submission.assemble(bad, out, system="aaa_bad", copy_code=False)
    a_good = submission.assemble(good, out, system="zzz_good", copy_code=False)
    assert not a_bad.passed and a_good.passed, submission.render(a_good)
    with_logs = result_summarizer.summarize_results(str(out / "TESTORG"), "training", "3.1.0")[0]
    rows = {r["system"]: r["maskrcnn"] for r in with_logs.to_dict("records")}
    assert a_good.summarizer.score_min == pytest.approx(rows["zzz_good"])
    assert (a_good.review_dir / "mlperf_review.md").is_file() and a_good.review_dir != a_bad.review_dir


@pytest.mark.slow  # the official checkers on several folders
def test_the_submission_is_checked_under_the_logs_round_unless_told(tmp_path, capsys):
    """The builder checked every folder under 3.1.0 while a plain review takes the round the logs are dated in:
    logs of 1.0.0 failed the 3.1.0 compliance rules with no word about the round. It takes the logs' round; a
    --ruleset other than theirs is checked as asked, with a warning naming both."""
    results = tmp_path / "results"
    v1 = {**RCP96, "ruleset": "1.0.0", "gbs": 64, "lr": 0.08, "warmup_steps": 800, "warmup_factor": 1e-4,
          "decay_steps": (18000, 24000), "num_image_candidates": 8000}
    for i, e in enumerate((14, 15, 14, 14, 15)):
        write_log(results / f"result_{i}.txt", epochs=e, ttt_min=20.0 + i, seed=4000 + i, **v1)
    a = submission.assemble(results, tmp_path / "s1", copy_code=False, write_review=False)
    assert a.package.ruleset == "1.0.0" and a.passed, submission.render(a)
    assert not [w for w in a.warnings if "dated" in w]
    b = submission.assemble(results, tmp_path / "s2", ruleset="3.1.0", copy_code=False, write_review=False)
    assert b.package.ruleset == "3.1.0"
    assert any("dated for training 1.0.0" in w and "3.1.0" in w for w in b.warnings), b.warnings
    rc = main(["submission", str(results), "--out", str(tmp_path / "s3"), "--no-implementation"])
    assert rc == 0 and "package checker (1.0.0" in capsys.readouterr().out
    # logs of two rounds: the round most are dated in, as a plain review takes it
    from mlperf_review import review_folder

    write_log(results / "result_4.txt", epochs=15, ttt_min=24.0, seed=4004, **{**v1, "ruleset": "1.1.0"})
    c = submission.assemble(results, tmp_path / "s4", copy_code=False, write_review=False)
    assert c.package.ruleset == review_folder(results).ruleset == "1.0.0"


@pytest.mark.slow  # the official checkers on several folders
def test_nvidias_platform_names_fill_the_counts_and_a_folder_without_a_score_is_not_ok(tmp_path, capsys):
    """NVIDIA's own platform string ('1xNVIDIA DGX A100', as in its v0.7 logs) left the node's CPU and GPU counts
    'TO FILL'; the result summarizer then had no score (it reads them as numbers) and the command still exited 0.
    The counts come from the name; a folder the summarizer cannot score exits 1."""
    assert submission._known_from_platform("1xNVIDIA DGX A100") == {
        "number_of_nodes": "1", "host_processors_per_node": "2", "accelerators_per_node": "8"}
    assert submission._known_from_platform("4xDGXH100")["accelerators_per_node"] == "8"
    assert "accelerators_per_node" not in submission._known_from_platform("2xMyCluster-H100")
    results = five_runs(tmp_path / "results", platform="2xMyCluster-H100")
    rc = main(["submission", str(results), "--out", str(tmp_path / "s"), "--no-implementation"])
    out = capsys.readouterr().out
    assert "result summarizer: no score" in out and rc == 1, out


def test_a_summarizer_crash_blames_the_counts_only_when_they_are_not_filled_in(tmp_path):
    """Every crash of the result summarizer was said to come from the system description's counts (--system-json),
    a result record without metadata too."""
    from mlperf_review import official

    def rendered(to_fill):
        a = submission.Assembly(org_dir=tmp_path, system="s", results=[tmp_path / "result_0.txt"],
                                system_json=tmp_path / "s.json", implementation=tmp_path, to_fill=to_fill,
                                package=official.PackageCheck("3.1.0", passed=True),
                                summarizer=official.SummarizerResult(crash="KeyError: 'metadata'"))
        return next(line for line in submission.render(a).splitlines() if line.startswith("result summarizer"))

    assert rendered([]) == "result summarizer: no score (KeyError: 'metadata')"
    assert rendered(["cooling", "accelerators_per_node"]) == ("result summarizer: no score (KeyError: 'metadata'): "
                                                              "it reads accelerators_per_node as numbers "
                                                              "(--system-json)")


@pytest.mark.slow  # starts git
def test_uncommitted_changes_of_the_implementation_are_named(tmp_path):
    """The implementation folder copies the checkout as it is when the folder is built; a tracked file changed
    since the last commit may not be the code the runs ran, and the builder now says which."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=ci", "-c", "user.email=ci@example.org", *args],
                       check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "run_and_time.sh").write_text("echo one\n")
    (tmp_path / "notes.txt").write_text("untracked\n")
    git("add", "run_and_time.sh")
    git("commit", "-q", "-m", "one")
    assert submission.uncommitted(tmp_path) == []
    (tmp_path / "run_and_time.sh").write_text("echo two\n")
    assert submission.uncommitted(tmp_path) == ["run_and_time.sh"]


@pytest.mark.slow  # the official checkers, three times
def test_a_rebuild_keeps_no_stale_scaling_and_reads_the_systems_checker_params(tmp_path):
    """The RCP check's scaling.json is this build's: a stale one in the folder (an earlier build's, with another
    ruleset) was copied into the checked copy, and stayed in the folder when this build's RCP check wrote none;
    the result summarizer applies any it finds. A committee's system-wide package_checker_params
    (results/<system>/package_checker_params, which the official package checker reads) was left out of the
    checked copy: its rcp-bypass did not count."""
    results = five_runs(tmp_path / "results")
    out = tmp_path / "s"
    first = submission.assemble(results, out, copy_code=False, write_review=False)
    assert first.passed, submission.render(first)
    system_dir = out / "TESTORG" / "results" / "4xDGXH100"
    scaling = system_dir / "maskrcnn" / "scaling.json"
    written = scaling.read_text() if scaling.exists() else None
    scaling.write_text(json.dumps({"scaling_factor": 3.0}))  # stale
    again = submission.assemble(results, out, copy_code=False, write_review=False)
    assert again.summarizer.score_min == pytest.approx(first.summarizer.score_min)
    assert (scaling.read_text() if scaling.exists() else None) == written
    # runs far faster than the RCP allows fail its check; the system-wide bypass lets them pass, as officially
    fast = five_runs(tmp_path / "fast", epochs=(8, 8, 8, 8, 8))
    out2 = tmp_path / "s2"
    refused = submission.assemble(fast, out2, copy_code=False, write_review=False)
    assert not refused.passed and any("RCP" in e for e in refused.package.errors), submission.render(refused)
    (out2 / "TESTORG" / "results" / "4xDGXH100" / "package_checker_params").write_text("rcp-bypass")
    official = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(out2 / "TESTORG"),
                               "training", "3.1.0"], capture_output=True, text=True, cwd=tmp_path)
    bypassed = submission.assemble(fast, out2, copy_code=False, write_review=False)
    # the command's own verdict line (its exit code is 0 whatever it found)
    says = "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in official.stdout + official.stderr
    assert bypassed.passed == says == True, official.stdout[-2000:] + official.stderr[-2000:]
    # the review of that system's results, as `submission` writes it beside them and as `python -m mlperf_review
    # .../maskrcnn` gives it: it staged the result files alone, and said FAIL (RCP) where the official checker
    # and the assembly pass
    from mlperf_review.core import review_folder

    review = review_folder(out2 / "TESTORG" / "results" / "4xDGXH100" / "maskrcnn")
    assert review.verdict == "PASS", review.problems
    # passed by the bypass, not by the RCP: the review said "olympic mean 8.00 >= ... fastest mean allowed 13.xx"
    assert review.rcp.message.endswith("passed using rcp_bypass"), review.rcp.message
    explained = review.rcp.explanation
    assert "rcp-bypass" in explained and " >= " not in explained and "faster than the RCP allows" in explained, \
        explained


def test_without_mlperf_logging_the_submission_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """The review said it in one line (exit 2); `submission` wrote the folder, then imported the package checker
    outside its error handling: a traceback, exit 1 ("rejected")."""
    from mlperf_review import official

    five_runs(tmp_path / "res")
    monkeypatch.setattr(official, "available", lambda: False)
    code = main(["submission", str(tmp_path / "res"), "--out", str(tmp_path / "sub"), "--org", "TESTORG",
                 "--no-implementation"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: mlperf-logging is not installed"), err
    assert not (tmp_path / "sub").exists()


@pytest.mark.slow  # the official package checker
def test_a_submissions_results_are_reviewed_under_its_system_descriptions_division(tmp_path, monkeypatch):
    """Reviewing results/<system>/maskrcnn of a submission staged the package by the logs' division, while the
    package checker takes systems/<system>.json's: runs far faster than the RCP allows under an open system
    description passed officially (no RCP check in the open division) and failed the review."""
    from mlperf_review.core import review_folder

    out = tmp_path / "s"
    submission.assemble(five_runs(tmp_path / "fast", epochs=(8, 8, 8, 8, 8)), out, copy_code=False,
                        write_review=False)
    (system,) = (out / "TESTORG" / "systems").glob("*.json")
    desc = json.loads(system.read_text())
    assert desc["division"] == "closed"
    system.write_text(json.dumps(dict(desc, division="open")))
    official = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(out / "TESTORG"),
                               "training", "3.1.0"], capture_output=True, text=True, cwd=tmp_path)
    says = "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in official.stdout + official.stderr
    review = review_folder(out / "TESTORG" / "results" / system.stem / "maskrcnn")
    assert (review.verdict == "PASS") == says == True, (review.problems, official.stdout[-1500:])
    assert any(f"{system} says division 'open', the logs 'closed'" in w for w in review.warnings), review.warnings
    monkeypatch.chdir(out / "TESTORG" / "results" / system.stem / "maskrcnn")  # reviewed as "."
    assert review_folder(Path(".")).verdict == "PASS"
    system.write_text("{not json")
    with pytest.raises(Exception, match="cannot read the system description .*json"):
        review_folder(out / "TESTORG" / "results" / system.stem / "maskrcnn")
