import pytest

from maskrcnn_benchmark.utils.errors import ConfigError
from maskrcnn_benchmark.utils.imports import load_catalog


@pytest.mark.parametrize("text,needle", [
    ("class DatasetCatalog:\n    pass\nclass ModelCatalog(\n", r"cannot be loaded \(line 3\): SyntaxError"),
    ("import no_such_module_here\n", r"cannot be loaded: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("class ModelCatalog:\n    pass\n", r"defines no DatasetCatalog"),
])
def test_a_paths_catalog_that_cannot_be_used_is_one_line_naming_it(tmp_path, text, needle):
    """A syntax error, a failing import or a missing class in the user's PATHS_CATALOG file was a traceback (exit
    5, a bug's code), from the preflight too."""
    path = tmp_path / "my_catalog.py"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"PATHS_CATALOG file '{path}' " + needle) as e:
        load_catalog(str(path))
    assert "\n" not in str(e.value)


def test_a_catalog_of_datasets_only_still_serves_the_datasets(tmp_path):
    path = tmp_path / "datasets_only.py"
    path.write_text("class DatasetCatalog:\n    pass\n")
    assert load_catalog(str(path)).DatasetCatalog
    with pytest.raises(ConfigError, match="defines no ModelCatalog"):
        load_catalog(str(path), needs="ModelCatalog")
