"""The programs' command lines: options may stand anywhere among the KEY VALUE overrides; an option a program does
not know is refused by name; the exit-code table in docs/cluster.md is the one the programs use."""
import re

import pytest

from helpers import REPO
from maskrcnn_benchmark.cli import exit_codes, test_net, train_mlperf
from maskrcnn_benchmark.cli.common import parse_with_overrides


def test_options_anywhere_among_the_overrides():
    args, opts = parse_with_overrides(train_mlperf.build_parser(), [
        "--config-file", "c.yaml", "SOLVER.MAX_ITER", "4", "--resume", "out/model_0000004.pth",
        "MODEL.RPN.STRADDLE_THRESH", "-1", "SOLVER.BASE_LR", "-0.5e-3", "--seed", "3", "OUTPUT_DIR", "o",
        "--sync-eval"])
    assert args.config_file == "c.yaml" and args.resume == "out/model_0000004.pth" and args.seed == 3
    assert args.sync_eval
    assert opts == ["SOLVER.MAX_ITER", "4", "MODEL.RPN.STRADDLE_THRESH", "-1", "SOLVER.BASE_LR", "-0.5e-3",
                    "OUTPUT_DIR", "o"]


def test_nvidia_order_still_works():
    args, opts = parse_with_overrides(train_mlperf.build_parser(), [
        "--local_rank=3", "--config-file", "c.yaml", "DTYPE", "float16"])
    assert args.local_rank == 3 and opts == ["DTYPE", "float16"]


@pytest.mark.parametrize("argv,unknown", [
    (["--config-file", "c.yaml", "SOLVER.MAX_ITER", "4", "--resum", "x"], "--resum"),
    (["--config-file", "c.yaml", "--bogus=1", "SOLVER.MAX_ITER", "4"], "--bogus"),
])
def test_an_unknown_option_is_refused_by_name(argv, unknown, capsys):
    with pytest.raises(SystemExit) as e:
        parse_with_overrides(test_net.build_parser(), argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: unknown option {unknown}")


def test_docs_show_the_exit_code_table_of_the_code():
    text = open(f"{REPO}/docs/cluster.md").read()
    block = re.search(r"<!-- exit-codes -->\n(.*?)\n<!-- /exit-codes -->", text, re.S)
    assert block, "docs/cluster.md lost its exit-code table markers"
    assert block.group(1).strip() == exit_codes.markdown_table()
