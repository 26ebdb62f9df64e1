"""The pilot's advice (``python -m mlperf_review.pilot``, slurm/run_experiments.sh with PILOT=1): the time budget of
the timed runs from one trial's log, timed as result_summarizer times a run."""
import json

import pytest

from mlperf_review import pilot
from mlperf_review.parse import parse_log
from mlperf_review.summary import summarize


def _line(key, t_ms, value=None, **metadata):
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": metadata}) + "\n"


def _log(path, starts, stop_status="success"):
    lines = [_line("init_start", 0)] + [_line("run_start", t) for t in starts]
    lines.append(_line("run_stop", 600000, status=stop_status))
    path.write_text("".join(lines))
    return path


def test_the_pilot_times_the_run_as_the_summarizer_does(tmp_path, capsys):
    """A log whose ranks each wrote run_start (the last 60 s after the first): the pilot timed from the first, the
    score (result_summarizer: the last run_start before run_stop) from the last."""
    log = _log(tmp_path / "result_0.txt", [120000, 180000])
    assert summarize(parse_log(log)).ttt_min == 7.0  # (600 - 180) s
    assert pilot.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pilot: time to train 7.0 min, init 3.0 min: set DGXRUNMINUTES=8 DGXINITMINUTES=5"), out


def test_a_pilot_that_did_not_converge_says_its_time_is_not_a_time_to_train(tmp_path, capsys):
    assert pilot.main([str(_log(tmp_path / "result_0.txt", [120000], stop_status="aborted"))]) == 0
    out = capsys.readouterr().out
    assert "did not converge (run_stop status 'aborted')" in out and "DGXRUNMINUTES" in out, out


@pytest.mark.parametrize("content", [None, "no MLLOG line here\n"])
def test_a_log_it_cannot_time_is_one_line_naming_it(tmp_path, capsys, content):
    """A missing or empty log printed "the log has no run_start/run_stop", naming no file, and exited 0; no
    argument was an IndexError traceback."""
    path = tmp_path / "result_0.txt"
    if content is not None:
        path.write_text(content)
    assert pilot.main([str(path)]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "result_0.txt" in err[0] and not captured.out, (err, captured.out)
    with pytest.raises(SystemExit) as e:
        pilot.main([])
    assert e.value.code == 2
