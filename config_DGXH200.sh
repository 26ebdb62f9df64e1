#!/bin/bash
# NVIDIA DGX H200 (1 node(s) x 8 H200 SXM 141 GB, 2 sockets x 56 cores, HT), GBS 96 (12 images/GPU).
# Hyperparameters: exactly RCP maskrcnn_ref_96 of mlperf-logging training_3.1.0/rcps_maskrcnn.json (base LR 0.12,
# warmup 625 iterations x 0.000192, decay 0.1 at (12000,16000)); tools/check_recipe.py verifies it before every run.
# num_image_candidates is logged as 12000 (FPN_POST_NMS_TOP_N_TRAIN: 1000 x 12 images per GPU, per batch, as NVIDIA's
# v1.0+ code logs it) where the RCP records the reference's 6000; the recipe check judges it by the closed rules
# (1000 x images per GPU), not against the RCP.
# Anchor: NVIDIA's MLPerf v1.0-v3.0 single-node DGX A100/H100 configs use this recipe (12 images/GPU, GBS 96).
# Source it (run_and_time.sh does when DGXSYSTEM=DGXH200); every value can be overridden from the environment.

## DL params
export EXTRA_PARAMS="${EXTRA_PARAMS:-}"
export EXTRA_CONFIG="${EXTRA_CONFIG:-SOLVER.BASE_LR 0.12 SOLVER.MAX_ITER 40000 SOLVER.WARMUP_FACTOR 0.000192 SOLVER.WARMUP_ITERS 625 SOLVER.WARMUP_METHOD mlperf_linear SOLVER.STEPS (12000,16000) SOLVER.IMS_PER_BATCH 96 TEST.IMS_PER_BATCH 8 MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN 12000 NHWC True}"

## System run params
export DGXSYSTEM="${DGXSYSTEM:-DGXH200}"
export DGXNNODES="${DGXNNODES:-1}"

## Time budget (minutes). A trial gets the expected training time plus the init allowance, +25 %: Slurm stops a
## trial at that limit (srun --time) and the next one starts. The job asks for NEXP trials + 15 minutes.
export DGXRUNMINUTES="${DGXRUNMINUTES:-30}"  # on paper (docs/cluster.md, "Scale on paper"): not yet measured
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
