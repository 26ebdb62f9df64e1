#!/bin/bash
# The one file a site edits: copy it to site.sh in the checkout (or point SITE_CONFIG at it). slurm/submit.sh and
# slurm/run_experiments.sh (the batch scripts' body, slurm/gpu_check.sbatch's too) read it; every value can still be
# overridden from the environment. Empty values keep the defaults in the comments.

## Who submits (one variable names the submitter everywhere: the MLPerf logs, the RESULT lines, the submission
## folder) and on what (the MLPerf log's submission_platform and the name of systems/<system>.json).
export MLPERF_SUBMISSION_ORG="${MLPERF_SUBMISSION_ORG:-}"            # e.g. MyHPCCenter
export MLPERF_SUBMISSION_PLATFORM="${MLPERF_SUBMISSION_PLATFORM:-}"  # default: <nodes>x<DGXSYSTEM>
export MLPERF_SUBMISSION_STATUS="${MLPERF_SUBMISSION_STATUS:-onprem}"

## Slurm: where the jobs go. sbatch reads these itself; slurm/submit.sh passes GPU_REQUEST in place of the batch
## scripts' --gpus-per-node=8.
SBATCH_PARTITION="${SBATCH_PARTITION:-}"  # e.g. gpu
SBATCH_ACCOUNT="${SBATCH_ACCOUNT:-}"
SBATCH_QOS="${SBATCH_QOS:-}"
for _var in SBATCH_PARTITION SBATCH_ACCOUNT SBATCH_QOS; do  # exported only when set: sbatch takes "" as the value
  if [[ -n "${!_var}" ]]; then export "${_var?}"; else unset "${_var}"; fi
done
unset _var
# GPU_REQUEST: unset asks for --gpus-per-node=<DGXNGPU of the config>; or set it: --gres=gpu:h100:8, or "" where
# nodes come with their GPUs. Example:
# GPU_REQUEST="--gres=gpu:h100:8"

## Container: singularity | apptainer | pyxis (srun --container-image, as on NVIDIA's SuperPODs), or CONTAINER=none
## to run on the hosts' own Python.
CONTAINER_RUNTIME="${CONTAINER_RUNTIME:-}"             # default: singularity, else apptainer where only it is installed
CONTAINER="${CONTAINER:-}"                        # default: singularity/maskrcnn.sif in the checkout
DATADIR="${DATADIR:-}"                            # COCO 2017 (train2017/ val2017/ annotations/), bound at /data
WEIGHTS_DIR="${WEIGHTS_DIR:-}"                    # holds R-50.pkl, bound at /coco/models
CONTAINER_MOUNTS="${CONTAINER_MOUNTS:-}"          # more binds, src:dst[:ro],...
# Where Singularity/Apptainer keep their cache and build files (the home folder is often too small):
# export SINGULARITY_CACHEDIR=/scratch/$USER/singularity-cache SINGULARITY_TMPDIR=/scratch/$USER/tmp
# export APPTAINER_CACHEDIR=/scratch/$USER/apptainer-cache APPTAINER_TMPDIR=/scratch/$USER/tmp

## The page cache, which MLPerf requires dropped before every run: the default command needs root on the nodes;
## a job that cannot drop it stops before its first trial (exit 23).
DROP_CACHES_CMD="${DROP_CACHES_CMD:-}"  # default: sync && echo 3 > /proc/sys/vm/drop_caches; e.g. sudo /sbin/sysctl vm.drop_caches=3
CLEAR_CACHES="${CLEAR_CACHES:-}"        # 1 (default); 0 runs trials whose logs say cache_clear false (not submittable)

## Network: the interface and InfiniBand adapters NCCL uses between nodes (nvidia-smi topo -m, ibstat).
# export NCCL_SOCKET_IFNAME=ib0                   # or the Ethernet interface of the compute network
# export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3
NCCL_CHECK="${NCCL_CHECK:-}"                      # 1 (default on multi-node jobs): all-reduce across nodes first
NCCL_MIN_BUSBW="${NCCL_MIN_BUSBW:-}"              # GB/s floor for that check (0: report only)

## The system description of the submission folder (python -m mlperf_review submission --system-json): your
## values for the fields mlperf-logging's system-description checker requires (processors, memory, network, ...).
SYSTEM_JSON="${SYSTEM_JSON:-}"
RESULTS_ROOT="${RESULTS_ROOT:-results}"           # where jobs write <job name>-<job id>/

## Time: measured by a pilot (PILOT=1 sbatch ...), or projected by make gpu-check; the config's figure otherwise.
# export DGXRUNMINUTES=25 DGXINITMINUTES=8
