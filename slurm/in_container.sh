#!/bin/bash
# Run a command in the job's image (Singularity or Apptainer) the way every trial runs it:
#   CONTAINER=IMAGE CONTAINER_BINDS=src:dst[:ro],... slurm/in_container.sh ./run_and_time.sh
# --cleanenv: nothing of the host's environment leaks in (PYTHONPATH, a ~/.local site, a host venv) except the
# variables the job means to pass: Slurm's, the system config's (DGX*, EXTRA_*, ...), MLPerf's, NCCL's/UCX's, gloo's
# (GLOO_SOCKET_IFNAME: the trainer's side group for its stop decisions is gloo, beside NCCL), torch's (TORCH_*:
# torch.distributed's, TORCH_LOGS, the site hook TORCH_DETECTRON_ENV_MODULE, the compile cache's key tag;
# TORCHINDUCTOR_*, TRITON_*, PYTORCH_* such as PYTORCH_CUDA_ALLOC_CONF), CUDA's and its libraries'
# (CUDA_DEVICE_MAX_CONNECTIONS, CUDA_MODULE_LOADING, CUBLAS_*, CUDNN_*, SHARP_COLL_*, NVIDIA_TF32_OVERRIDE), the run's
# (MASTER_*, TRIAL_NAME, PREFLIGHT_*, ...) and CONTAINER_ENV_EXTRA (names, by spaces or commas). Inside:
# PYTHONNOUSERSITE=1,
# DATADIR=/data, LOGDIR=/results, the working directory /workspace/object_detection (the checkout bound over the
# image's copy). --nv exposes the GPUs.
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u
runtime="${CONTAINER_RUNTIME:-}"
if [[ -z "${runtime}" ]]; then  # as the batch scripts choose: singularity, else apptainer (installed without the link)
  runtime=singularity
  if ! command -v singularity > /dev/null && command -v apptainer > /dev/null; then runtime=apptainer; fi
fi
image="${CONTAINER:?CONTAINER (the image) is not set}"
names=(MASTER_ADDR MASTER_PORT TRIAL_NAME OUTPUT_DIR PREFLIGHT_ONLY PREFLIGHT_NNODES PREFLIGHT_DONE PREFLIGHT_GPUS_ELSEWHERE
       MLPERF_CACHE_CLEARED
       NEXP EXTRA_PARAMS EXTRA_CONFIG CONFIG_FILE DTYPE PATHS_CATALOG WEIGHTS TRAIN_SCRIPT NPROC_PER_NODE BIND_LAUNCH_ARGS
       SKIP_CONFIG ALLOW_NON_RCP PROFILE NCU_SKIP NCU_COUNT OMP_NUM_THREADS CUDA_VISIBLE_DEVICES
       TORCHINDUCTOR_CACHE_DIR DISTRIBUTED_TIMEOUT NOT_CONVERGED_EXIT_CODE)
extra="${CONTAINER_ENV_EXTRA:-}"
read -r -a extra_names <<< "${extra//,/ }"  # names, separated by spaces or commas
pass=()
while IFS= read -r -d '' item; do
  name="${item%%=*}"
  case "${name}" in
    SLURM_* | DGX* | MLPERF_* | NCCL_* | UCX_* | GLOO_* | MASKRCNN_* | TORCH_* | TORCHINDUCTOR_* | TRITON_* | \
    PYTORCH_* | CUDA_DEVICE_MAX_CONNECTIONS | CUDA_MODULE_LOADING | CUBLAS_* | CUDNN_* | SHARP_COLL_* | \
    NVIDIA_TF32_OVERRIDE)
      pass+=("${item}") ;;
    *) for n in "${names[@]}" "${extra_names[@]}"; do
         if [[ "${name}" == "${n}" ]]; then pass+=("${item}"); break; fi
       done ;;
  esac
done < <(env -0)
binds=()
if [[ -n "${CONTAINER_BINDS:-}" ]]; then binds=(-B "${CONTAINER_BINDS}"); fi
exec "${runtime}" exec --cleanenv --nv "${binds[@]}" --pwd /workspace/object_detection "${image}" \
  env "${pass[@]}" PYTHONNOUSERSITE=1 DATADIR=/data LOGDIR=/results "$@"
