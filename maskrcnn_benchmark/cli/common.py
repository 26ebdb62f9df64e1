"""What the programs' command lines share: a command line refused in one line, ``--config-file``, ``--local_rank``,
and ``KEY VALUE`` overrides that may come before, between or after the options."""
import argparse


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose refusal is one line, ``PROG: error: MESSAGE (see --help)``, and the exit code
    of bad input (1; argparse prints its whole usage block and exits 2, the code of a diverged run)."""

    def error(self, message):
        from .exit_codes import BAD_INPUT

        self.exit(BAD_INPUT.code, f"{self.prog}: error: {message} (see --help)\n")


def parser(description, config_file=True, local_rank=True, **kwargs):
    p = Parser(description=description, allow_abbrev=False, **kwargs)
    if config_file:
        p.add_argument("--config-file", default="", metavar="FILE", help="path to a YAML config")
    if local_rank:
        p.add_argument("--local_rank", "--local-rank", type=int, default=None, help="set by the launcher")
    return p


def parse_with_overrides(p, argv=None):
    """``(args, opts)``: the options wherever they stand, and the remaining ``KEY VALUE`` pairs in order.

    An option this program does not know is refused by name (one line, exit 1), not taken for a config key."""
    p.epilog = (p.epilog or "") + "Options may stand before, between or after the KEY VALUE config overrides."
    args, rest = p.parse_known_args(argv)
    for i, token in enumerate(rest):
        if i % 2 == 0 and token.startswith("--"):
            p.error(f"unknown option {token.split('=', 1)[0]}")
    return args, rest
