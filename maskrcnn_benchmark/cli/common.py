"""What the programs' command lines share: ``--config-file``, ``--local_rank``, and ``KEY VALUE`` overrides that
may come before, between or after the options."""
import argparse


def parser(description, config_file=True, local_rank=True):
    p = argparse.ArgumentParser(description=description, allow_abbrev=False)
    if config_file:
        p.add_argument("--config-file", default="", metavar="FILE", help="path to a YAML config")
    if local_rank:
        p.add_argument("--local_rank", "--local-rank", type=int, default=None, help="set by the launcher")
    return p


def parse_with_overrides(p, argv=None):
    """``(args, opts)``: the options wherever they stand, and the remaining ``KEY VALUE`` pairs in order.

    An option this program does not know is refused by name (``argparse`` exits 2 with one line), not taken for
    a config key."""
    p.epilog = (p.epilog or "") + "Options may stand before, between or after the KEY VALUE config overrides."
    args, rest = p.parse_known_args(argv)
    for i, token in enumerate(rest):
        if i % 2 == 0 and token.startswith("--"):
            p.error(f"unknown option {token.split('=', 1)[0]}")
    return args, rest
