#!/bin/bash
# 4 nodes x 8 A100 x 4 images/GPU (the slurm/maskrcnn_4node.sbatch job): NVIDIA v0.7 closed recipe for GBS 128.
# One difference from NVIDIA's config_DGXA100_multi_4x8x4.sh, outside the recipe: TEST.IMS_PER_BATCH 32, one image
# per GPU as in every config here (NVIDIA's evaluates 64, two per GPU); make gpu-check measures evaluation at that.
# Source it (run_and_time.sh does when DGXSYSTEM=DGXA100_4x8x4); every value can be overridden from the environment.

## DL params
export EXTRA_PARAMS="${EXTRA_PARAMS:-}"
export EXTRA_CONFIG="${EXTRA_CONFIG:-SOLVER.BASE_LR 0.16 SOLVER.MAX_ITER 40000 SOLVER.WARMUP_FACTOR 0.000256 SOLVER.WARMUP_ITERS 625 SOLVER.WARMUP_METHOD mlperf_linear SOLVER.STEPS (9000,12000) SOLVER.IMS_PER_BATCH 128 TEST.IMS_PER_BATCH 32 MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN 4000 NHWC True}"

## System run params
export DGXSYSTEM="${DGXSYSTEM:-DGXA100_4x8x4}"
export DGXNNODES="${DGXNNODES:-4}"

## Time budget (minutes). A trial gets the expected training time plus the init allowance, +25 %: Slurm stops a
## trial at that limit (srun --time) and the next one starts. The job asks for NEXP trials + 15 minutes.
export DGXRUNMINUTES="${DGXRUNMINUTES:-33}"  # NVIDIA v0.7 4 x DGX-A100: 27-33 min to train
export DGXINITMINUTES="${DGXINITMINUTES:-5}"
export NEXP="${NEXP:-5}"
# shellcheck source=slurm/time_budget.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm/time_budget.sh"  # TRIAL_MINUTES and WALLTIME from the three above

## System config params
export DGXNGPU="${DGXNGPU:-8}"
# The CPU layout is read from the machine by bind_launch (sysfs: NUMA nodes, cores, each GPU's NUMA node); set
# DGXNSOCKET and DGXSOCKETCORES (here 2 x 64) only to force NVIDIA's arithmetic plan, DGXHT=1 to leave out the
# hyperthread siblings.
export DGXSOCKETCORES="${DGXSOCKETCORES-}"
export DGXNSOCKET="${DGXNSOCKET-}"
export DGXHT="${DGXHT-}"
# Bus-bandwidth floor (GB/s) of the all-reduce across nodes (NCCL_CHECK, gpu_check.sbatch): a quarter of the
# node's line rate (8 x 200 Gb/s HDR InfiniBand = 200 GB/s). NCCL over every HCA clears it by far at 256 MB;
# a fall-back to TCP sockets or to one HCA does not. A requirement, not a measured figure.
export NCCL_MIN_BUSBW="${NCCL_MIN_BUSBW:-50}"
