"""The package's command lines, one module per program: argument parsing, the exit codes
(:mod:`~maskrcnn_benchmark.cli.exit_codes`) and the one-line errors. ``tools/<program>.py`` are their entry points
under NVIDIA's names; the library they call knows nothing of argv, exit codes or terminals."""
