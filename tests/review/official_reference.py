"""What mlperf-logging's own tools say about a results folder, computed independently of the review.

The folder is laid out as a submitter would lay out a package (``<org>/results/<system>/maskrcnn/`` holding every
file of the folder, ``<org>/systems/<system>.json``), then, as a submitter runs them: the package checker
(verdict from its closing line), the RCP checker on the benchmark folder, and the result summarizer (its
maskrcnn column, which applies the ``scaling.json`` the package checker wrote).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any, Dict

SYSTEM = {
    "submitter": "TESTORG", "division": "closed", "status": "onprem", "system_name": "testsys",
    "number_of_nodes": "1", "host_processors_per_node": "2", "host_processor_model_name": "cpu",
    "host_processor_core_count": "8", "host_processor_vcpu_count": "16", "host_processor_frequency": "",
    "host_processor_caches": "", "host_processor_interconnect": "", "host_memory_capacity": "",
    "host_storage_type": "", "host_storage_capacity": "", "host_networking": "", "host_networking_topology": "",
    "host_memory_configuration": "", "accelerators_per_node": "8", "accelerator_model_name": "gpu",
    "accelerator_host_interconnect": "", "accelerator_frequency": "", "accelerator_on-chip_memories": "",
    "accelerator_memory_configuration": "", "accelerator_memory_capacity": "", "accelerator_interconnect": "",
    "accelerator_interconnect_topology": "", "cooling": "", "hw_notes": "", "framework": "pytorch",
    "other_software_stack": "", "operating_system": "", "sw_notes": "",
}


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelname, record.getMessage()))


class _RulesReadOnce:
    """Stands in for the ``yaml`` module inside the compliance checker, which parses its rule files again for every
    log it checks (with the pure-Python loader: most of a package check's time). The same text through the same
    loader gives the same rules, so each (text, loader) is parsed once and a deep copy handed out; every other
    attribute is yaml's own."""

    def __init__(self, real):
        self._real, self._rules = real, {}

    def __getattr__(self, name):
        return getattr(self._real, name)

    def load(self, stream, Loader):  # noqa: N803 - yaml's own keyword
        text = stream.read() if hasattr(stream, "read") else stream
        if (text, Loader) not in self._rules:
            self._rules[text, Loader] = self._real.load(text, Loader=Loader)
        return copy.deepcopy(self._rules[text, Loader])


_RULES = []


@contextlib.contextmanager
def _rules_read_once():
    from mlperf_logging.compliance_checker import mlp_compliance

    if not _RULES:
        _RULES.append(_RulesReadOnce(mlp_compliance.yaml))
    before, mlp_compliance.yaml = mlp_compliance.yaml, _RULES[0]
    try:
        yield
    finally:
        mlp_compliance.yaml = before


def lay_out(folder: Path, work: Path, division: str = "closed") -> Path:
    """Copy every file of ``folder`` into a package tree under ``work``; returns the org folder."""
    org = work / "TESTORG"
    bench = org / "results" / "testsys" / "maskrcnn"
    bench.mkdir(parents=True)
    (org / "systems").mkdir()
    (org / "systems" / "testsys.json").write_text(json.dumps(dict(SYSTEM, division=division)))
    for f in sorted(Path(folder).iterdir()):
        if f.is_file() and not f.name.startswith("mlperf_review"):
            shutil.copy(f, bench / f.name)
    return org


def official_answer(folder: Path, work: Path, ruleset: str, division: str = "closed") -> Dict[str, Any]:
    from mlperf_logging.package_checker import package_checker
    from mlperf_logging.rcp_checker import rcp_checker
    from mlperf_logging.result_summarizer import result_summarizer

    org = lay_out(folder, work, division)
    bench = org / "results" / "testsys" / "maskrcnn"
    root = logging.getLogger()
    handler = _Lines()
    saved = root.handlers[:], root.level
    root.handlers, root.level = [handler], logging.INFO
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                _rules_read_once():
            package_checker.check_training_package(str(org), "training", ruleset, False, False, False, False,
                                                   False, str(work / "package_checker.log"))
            scaling = bench / "scaling.json"
            factor = json.loads(scaling.read_text())["scaling_factor"] if scaling.exists() else None
            rcp = None
            if ruleset != "0.7.0" and division == "closed":
                passed, msg, norm = rcp_checker.check_directory(str(bench), "training", ruleset, False, False,
                                                                rcp_pass="pruned_rcps")
                rcp = {"passed": passed, "message": msg, "norm": norm}
            strong, _, detailed, _ = result_summarizer.summarize_results(str(org), "training", ruleset)
    finally:
        root.handlers, root.level = saved
    messages = [m for _, m in handler.lines]
    verdict = {"PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !": "PASS",
               "PACKAGE CHECKER FOUND ERRORS, LOOK INTO ERROR LOG LINES AND FIX THEM.": "FAIL"}
    verdicts = [verdict[m] for m in messages if m in verdict]
    assert len(verdicts) == 1, messages[-5:]
    score = strong.to_dict("records")[0]["maskrcnn"]
    score = None if score is None or (isinstance(score, float) and math.isnan(score)) else float(score)
    return {"verdict": verdicts[0], "score": score, "scaling_factor": factor, "rcp": rcp,
            "seeds_failed": "Seed checker failed" in messages,
            "errors": [m for lvl, m in handler.lines if lvl == "ERROR"]}


def official_compliance(path: Path, ruleset: str) -> bool:
    """``python -m mlperf_logging.compliance_checker`` verdict, in-process."""
    from mlperf_logging.compliance_checker import mlp_compliance

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers, root.level = [logging.NullHandler()], logging.INFO
    try:
        with _rules_read_once():
            checker = mlp_compliance.make_checker("training", ruleset, False, False)
            valid, _, _, _ = mlp_compliance.main(str(path), f"training_{ruleset}/common.yaml", checker)
    finally:
        root.handlers, root.level = saved
    return bool(valid)
