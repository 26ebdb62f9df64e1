"""Where a log line says it was written: the `file`/`lineno` of every MLPerf line name the code that logged the
event (as in NVIDIA's published logs, where they point into tools/train_mlperf.py), never the logger module."""
import io
import json
import os

import pytest

pytest.importorskip("mlperf_logging")

from maskrcnn_benchmark.utils.mlperf_logger import MLPerfLogger  # noqa: E402


def _records(stream):
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in stream.getvalue().splitlines()]


def test_named_and_generic_events_name_their_caller():
    stream = io.StringIO()
    logger = MLPerfLogger(stream=stream)

    def trainer_step():
        logger.init_start(); here = trainer_step.__code__.co_firstlineno + 1  # noqa: E702
        logger.event("custom_key", 1)
        logger.end("custom_interval")
        return here

    first = trainer_step()
    records = _records(stream)
    assert [r["key"] for r in records] == ["init_start", "custom_key", "custom_interval"]
    assert {os.path.basename(r["metadata"]["file"]) for r in records} == {os.path.basename(__file__)}
    assert [r["metadata"]["lineno"] for r in records] == [first, first + 1, first + 2]


def test_submission_keys_left_empty_in_the_site_file_take_their_defaults(monkeypatch):
    """slurm/site.example.sh exports ``MLPERF_SUBMISSION_ORG=""`` when a site leaves it blank; the log said
    ``submission_org: ""``, which mlperf-logging's common rules refuse (value != ''), while the RESULT line named
    the default submitter."""
    for key in ("ORG", "DIVISION", "STATUS", "PLATFORM"):
        monkeypatch.setenv(f"MLPERF_SUBMISSION_{key}", " ")
    monkeypatch.setenv("DGXSYSTEM", "DGXH100")
    stream = io.StringIO()
    MLPerfLogger(stream=stream).submission_info()
    values = {r["key"]: r["value"] for r in _records(stream)}
    assert values == {"submission_benchmark": "maskrcnn", "submission_org": "reference-implementation",
                      "submission_division": "closed", "submission_status": "onprem",
                      "submission_platform": "1xDGXH100"}
