"""The layering of docs/architecture.md, read from the source (bench/import_graph.py: ast, nothing imported)."""
import runpy

from helpers import REPO

graph = runpy.run_path(f"{REPO}/bench/import_graph.py", run_name="import_graph")
M = "maskrcnn_benchmark."

# a package may import only packages of a lower level (docs/architecture.md)
LEVEL = {M + "cli": 7, M + "engine": 6,
         M + "data": 5, M + "modeling": 5, M + "evaluation": 5, M + "solver": 5, M + "review": 5,
         M + "synthetic": 5, M + "structures": 4, M + "layers": 3, M + "config": 2, "mlperf_review": 2,
         M + "utils": 1}


def _package_edges():
    modules, edges = graph["import_edges"](REPO)
    package_of = graph["package_of"]
    return modules, [(a, b, package_of(a), package_of(b)) for a, b in edges]


def test_every_package_has_a_level():
    modules, _ = _package_edges()
    assert {graph["package_of"](m) for m in modules} - {"maskrcnn_benchmark"} == set(LEVEL)


def test_no_package_imports_a_higher_one():
    _, edges = _package_edges()
    assert [(a, b) for a, b, pa, pb in edges if pa != pb and LEVEL.get(pa, 0) <= LEVEL.get(pb, 0)] == []


def test_evaluation_and_data_stay_off_the_model_and_the_config():
    _, edges = _package_edges()
    assert [(a, b) for a, b, pa, pb in edges if pa == M + "evaluation" and pb == M + "modeling"] == []
    assert [(a, b) for a, b, pa, pb in edges
            if pa in (M + "data", M + "modeling", M + "evaluation", M + "structures", M + "layers")
            and pb == M + "config"] == []


def test_the_reviewer_imports_only_the_file_writer_of_the_package():
    _, edges = _package_edges()
    assert {b for a, b, pa, pb in edges if pa == "mlperf_review" and pb != "mlperf_review"} == \
        {M + "utils.fileio"}


def test_the_drawing_has_no_upward_import():
    m = graph["measure"](REPO)
    assert m["upward"] == 0, m["upward_list"]
