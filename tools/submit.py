#!/usr/bin/env python3
"""Submit MLPerf runs to Slurm from Python (submitit): the entry point of slurm/submit.py, the Slurm layer's
Python front end (it imports nothing of the model)."""
import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "slurm" / "submit.py"), run_name="__main__")
