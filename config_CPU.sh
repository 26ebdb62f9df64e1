#!/bin/bash
# Synthetic CPU run (the demo and CI): fp32, no pretrained weights, gloo, synthetic COCO-format data in $DATADIR
# (made by tools/make_synthetic_coco.py). Sockets/cores are left empty so bind_launch detects them.
# Source it (run_and_time.sh does when DGXSYSTEM=CPU); every value can be overridden from the environment.

## DL params
export CONFIG_FILE="${CONFIG_FILE:-configs/e2e_mask_rcnn_synthetic_cpu.yaml}"
export DTYPE="${DTYPE:-float32}"
export WEIGHTS="${WEIGHTS-}"              # empty: train from scratch (no MODEL.WEIGHT override)
export PATHS_CATALOG="${PATHS_CATALOG-}"  # empty: the package's default catalog (honours $DATADIR)
export DATADIR="${DATADIR:-datasets/synthetic}"
export EXTRA_PARAMS="${EXTRA_PARAMS:-}"
export EXTRA_CONFIG="${EXTRA_CONFIG:-}"
# The synthetic task is a research run: its 128-pixel images and small batch are not the closed recipe, so the
# recipe check warns ("allowed for a research run, not a closed submission") instead of refusing.
export ALLOW_NON_RCP="${ALLOW_NON_RCP:-1}"

## System run params
export DGXSYSTEM="${DGXSYSTEM:-CPU}"
export DGXNNODES="${DGXNNODES:-1}"

## Time budget (minutes). A trial gets the expected training time plus the init allowance, +25 %: Slurm stops a
## trial at that limit (srun --time) and the next one starts. The job asks for NEXP trials + 15 minutes.
export DGXRUNMINUTES="${DGXRUNMINUTES:-15}"  # the synthetic demo: 4-10 min on 2 cores; 13 when 4 processes share them
export DGXINITMINUTES="${DGXINITMINUTES:-5}"
export NEXP="${NEXP:-5}"
# shellcheck source=slurm/time_budget.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm/time_budget.sh"  # TRIAL_MINUTES and WALLTIME from the three above

## System config params
export DGXNGPU="${DGXNGPU:-1}"            # processes per node
export DGXSOCKETCORES="${DGXSOCKETCORES-}"
export DGXNSOCKET="${DGXNSOCKET-}"
export DGXHT="${DGXHT-}"
# Bus-bandwidth floor (GB/s) of the all-reduce across nodes (NCCL_CHECK, gpu_check.sbatch): gloo over the
# sandbox's network namespaces; the floor only says the data moved.
export NCCL_MIN_BUSBW="${NCCL_MIN_BUSBW:-0.01}"

# CPU training threads: this node's cores shared by its processes (at least 1).
_cores="$(nproc 2> /dev/null || echo 1)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( _cores / DGXNGPU > 0 ? _cores / DGXNGPU : 1 ))}"
unset _cores
