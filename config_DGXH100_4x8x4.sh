#!/bin/bash
# NVIDIA DGX H100 (4 node(s) x 8 H100 SXM 80 GB, 2 sockets x 56 cores, HT), GBS 128 (4 images/GPU).
# Hyperparameters: exactly RCP maskrcnn_ref_128 of mlperf-logging training_3.1.0/rcps_maskrcnn.json (base LR 0.16,
# warmup 625 iterations x 0.000256, decay 0.1 at (9000,12000)); tools/check_recipe.py verifies it before every run.
# Anchor: NVIDIA's multi-node configs run 4 images/GPU (v0.7 DGXA100 4x8x4 at GBS 128, v3.0 8-node DGX H100 at GBS 256).
# Source it (run_and_time.sh does when DGXSYSTEM=DGXH100_4x8x4); every value can be overridden from the environment.

## DL params
export EXTRA_PARAMS="${EXTRA_PARAMS:-}"
export EXTRA_CONFIG="${EXTRA_CONFIG:-SOLVER.BASE_LR 0.16 SOLVER.MAX_ITER 40000 SOLVER.WARMUP_FACTOR 0.000256 SOLVER.WARMUP_ITERS 625 SOLVER.WARMUP_METHOD mlperf_linear SOLVER.STEPS (9000,12000) SOLVER.IMS_PER_BATCH 128 TEST.IMS_PER_BATCH 32 MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN 4000 NHWC True}"

## System run params
export DGXSYSTEM="${DGXSYSTEM:-DGXH100_4x8x4}"
export DGXNNODES="${DGXNNODES:-4}"

## Time budget (minutes). A trial gets the expected training time plus the init allowance, +25 %: Slurm stops a
## trial at that limit (srun --time) and the next one starts. The job asks for NEXP trials + 15 minutes.
export DGXRUNMINUTES="${DGXRUNMINUTES:-12}"  # on paper (docs/cluster.md, "Scale on paper"): not yet measured
export DGXINITMINUTES="${DGXINITMINUTES:-10}"  # init: data, model, NCCL; compiling the step if COMPILE True
export NEXP="${NEXP:-5}"
# shellcheck source=slurm/time_budget.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm/time_budget.sh"  # TRIAL_MINUTES and WALLTIME from the three above

## System config params (DGX H100 and DGX H200: 2 x Intel Xeon Platinum 8480C, 56 cores each, HT on)
export DGXNGPU="${DGXNGPU:-8}"
# The CPU layout is read from the machine by bind_launch (sysfs: NUMA nodes, cores, each GPU's NUMA node); set
# DGXNSOCKET and DGXSOCKETCORES (here 2 x 56) only to force NVIDIA's arithmetic plan, DGXHT=1 to leave out the
# hyperthread siblings.
export DGXSOCKETCORES="${DGXSOCKETCORES-}"
export DGXNSOCKET="${DGXNSOCKET-}"
export DGXHT="${DGXHT-}"
# Bus-bandwidth floor (GB/s) of the all-reduce across nodes (NCCL_CHECK, gpu_check.sbatch): a quarter of the
# node's line rate (8 x 400 Gb/s NDR InfiniBand = 400 GB/s). NCCL over every HCA clears it by far at 256 MB;
# a fall-back to TCP sockets or to one HCA does not. A requirement, not a measured figure.
export NCCL_MIN_BUSBW="${NCCL_MIN_BUSBW:-100}"
