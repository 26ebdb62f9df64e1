#!/bin/bash
# Body of the Slurm batch scripts (slurm/*.sbatch): NEXP timed runs back to back in the current allocation, one
# log per run (LOGDIR/result_<k>.txt, never overwritten), every node running run_and_time.sh once per run (srun,
# one task per node) in the container image (CONTAINER_RUNTIME singularity | apptainer | pyxis) or on the hosts
# (CONTAINER=none). Variables and what each check means: docs/cluster.md.
#
# Order: the site file (SITE_CONFIG, default ./site.sh) and config_<DGXSYSTEM>.sh; checks on the batch host (the
# runtime, the image, every bind source: exit 20, 21, 22); tools/preflight.py in the image on the batch host (under
# pyxis in a 1-node srun step), for all the job's nodes (recipe, batch, GPUs, data and weights: exit 10-15); an
# all-reduce across the nodes (NCCL_CHECK, multi-node jobs); the trials. A trial that fails counts; after the second
# failure no trial starts (MLPerf accepts one failed run of five). PILOT=1: one trial with a generous limit, whose
# measured time the last line turns into DGXRUNMINUTES.
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u

# Exit codes of the launch layer (maskrcnn_benchmark/cli/exit_codes.py has the table; a test keeps them equal).
readonly EXIT_BAD_INPUT=1 EXIT_RUNTIME_MISSING=20 EXIT_IMAGE_UNREADABLE=21 EXIT_BIND_SOURCE_MISSING=22 EXIT_CACHES_NOT_DROPPED=23

fail() {  # code, message: one line, then exit
  echo "error: $2" >&2
  exit "$1"
}

REPO="${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}"
[[ -x "${REPO}/run_and_time.sh" ]] ||
  fail "${EXIT_BAD_INPUT}" "${REPO} is not the maskrcnn checkout (submit from it, or set REPO=)"
cd "${REPO}"
SITE_CONFIG="${SITE_CONFIG:-${REPO}/site.sh}"
if [[ -f "${SITE_CONFIG}" ]]; then
  # shellcheck source=/dev/null
  source "${SITE_CONFIG}"
fi
export DGXSYSTEM="${DGXSYSTEM:-DGXH100_4x8x4}"
# shellcheck source=slurm/projection.sh
source "${REPO}/slurm/projection.sh"
gpu_check_projection "${SLURM_JOB_NUM_NODES:-1}" run_experiments  # unless submit.sh, the site or the environment set it
[[ -f "config_${DGXSYSTEM}.sh" ]] ||
  fail "${EXIT_BAD_INPUT}" "no config_${DGXSYSTEM}.sh in ${REPO} (DGXSYSTEM=${DGXSYSTEM}; the configs are config_*.sh)"
if [[ "${SKIP_CONFIG:-0}" != 1 ]]; then
  # shellcheck source=/dev/null
  source "./config_${DGXSYSTEM}.sh"  # NEXP and TRIAL_MINUTES (the per-trial time limit) come from it
fi
NEXP="${NEXP:-5}"
if [[ "${PILOT:-0}" == 1 ]]; then
  NEXP=1
  TRIAL_MINUTES="${PILOT_MINUTES:-}"  # empty: the job's own limit
fi
NNODES="${SLURM_JOB_NUM_NODES:-1}"
JOBID="${SLURM_JOB_ID:-0}"
LOGDIR="$(realpath -m "${LOGDIR:-${RESULTS_ROOT:-${REPO}/results}/${SLURM_JOB_NAME:-maskrcnn}-${JOBID}}")"
export LOGDIR
if [[ -z "${CONTAINER:-}" && "${CONTAINER_RUNTIME:-}" == pyxis ]]; then
  CONTAINER="${REPO}/maskrcnn.sqsh"  # the Dockerfile's image as enroot imports it (enroot cannot run a SIF)
fi
CONTAINER="${CONTAINER:-${REPO}/singularity/maskrcnn.sif}"
if [[ "${CONTAINER}" == none ]]; then
  CONTAINER_RUNTIME=none
elif [[ -z "${CONTAINER_RUNTIME:-}" ]]; then
  CONTAINER_RUNTIME=singularity
  if ! command -v singularity > /dev/null && command -v apptainer > /dev/null; then CONTAINER_RUNTIME=apptainer; fi
fi
export CONTAINER CONTAINER_RUNTIME CONTAINER_ENV_EXTRA="${CONTAINER_ENV_EXTRA:-}"
CLEAR_CACHES="${CLEAR_CACHES:-1}"
DROP_CACHES_CMD="${DROP_CACHES_CMD:-sync && echo 3 > /proc/sys/vm/drop_caches}"
if [[ -z "${MLPERF_SUBMISSION_ORG:-}" ]]; then
  echo "run_experiments: WARNING: MLPERF_SUBMISSION_ORG is not set: the logs will name the submitter" \
       "'reference-implementation' (set it in the site file)" >&2
fi

# ------------------------------------------------------------------------------ checks on the batch host
mkdir -p "${LOGDIR}" 2> /dev/null ||
  fail "${EXIT_BIND_SOURCE_MISSING}" "cannot create LOGDIR ${LOGDIR} (its parent must exist and be writable)"
# a folder that exists but takes no file (read-only, another's, a full disk or inode quota): said now, not as an
# NCCL failure (the all-reduce's log) or a result file that can never be claimed
probe="${LOGDIR}/.write_test.$$"
if ! (: > "${probe}") 2> /dev/null; then
  fail "${EXIT_BIND_SOURCE_MISSING}" "LOGDIR ${LOGDIR} exists but this job cannot write a file in it (read-only, another user's, or its disk or inode quota full)"
fi
rm -f "${probe}"
binds=()
if [[ "${CONTAINER_RUNTIME}" != none ]]; then
  case "${CONTAINER_RUNTIME}" in
    singularity | apptainer)
      command -v "${CONTAINER_RUNTIME}" > /dev/null ||
        fail "${EXIT_RUNTIME_MISSING}" "the container runtime '${CONTAINER_RUNTIME}' is not on the PATH of the batch host ($(hostname)): load its module, set CONTAINER_RUNTIME, or CONTAINER=none"
      [[ -r "${CONTAINER}" ]] ||
        fail "${EXIT_IMAGE_UNREADABLE}" "the container image '${CONTAINER}' does not exist or is not readable (build it with singularity/build.sh, or set CONTAINER)" ;;
    pyxis)
      # the help read whole: grep -q would stop at the option, and srun's SIGPIPE fail the pipeline (pipefail)
      [[ "$(srun --help 2> /dev/null)" == *--container-image* ]] ||
        fail "${EXIT_RUNTIME_MISSING}" "srun has no --container-image here: the pyxis plugin is not installed (CONTAINER_RUNTIME=pyxis)"
      if [[ "${CONTAINER}" == /* || "${CONTAINER}" == ./* ]]; then
        [[ -r "${CONTAINER}" ]] ||
          fail "${EXIT_IMAGE_UNREADABLE}" "the container image '${CONTAINER}' does not exist or is not readable (build it from the Dockerfile: docker build, then enroot import; or set CONTAINER)"
      fi ;;
    *) fail "${EXIT_BAD_INPUT}" "CONTAINER_RUNTIME=${CONTAINER_RUNTIME}: use singularity, apptainer, pyxis or CONTAINER=none" ;;
  esac
  # The image holds the software; the code that runs is this checkout, bound over the image's copy (read-only):
  # config_<SITE>.sh files and fixes made here are what runs. Data and weights read-only; results read-write.
  DATADIR="${DATADIR:-/data}"
  WEIGHTS_DIR="${WEIGHTS_DIR:-/coco/models}"
  binds=("${REPO}:/workspace/object_detection:ro" "${DATADIR}:/data:ro" "${LOGDIR}:/results")
  if [[ -n "${WEIGHTS-/coco/models/R-50.pkl}" ]]; then binds+=("${WEIGHTS_DIR}:/coco/models:ro"); fi
  # gpu-check's parity stage: the golden outputs beside the checkout, where they are (as make gpu-check IMAGE=...)
  if [[ "${GPU_CHECK:-0}" == 1 && -d "${REPO}/../shared" ]]; then binds+=("$(realpath "${REPO}/../shared"):/workspace/shared:ro"); fi
  if [[ -n "${CONTAINER_MOUNTS:-}" ]]; then IFS=, read -r -a extra_mounts <<< "${CONTAINER_MOUNTS}"; binds+=("${extra_mounts[@]}"); fi
  for b in "${binds[@]}"; do
    src="${b%%:*}"
    [[ -e "${src}" ]] ||
      fail "${EXIT_BIND_SOURCE_MISSING}" "the bind source '${src}' (for ${b#*:}) does not exist on $(hostname): check DATADIR, WEIGHTS_DIR, CONTAINER_MOUNTS"
  done
  CONTAINER_BINDS="$(IFS=,; echo "${binds[*]}")"
  export CONTAINER_BINDS
else  # on the hosts: the site's folders are the trainer's paths (a site file sets them without export)
  if [[ -n "${DATADIR:-}" ]]; then export DATADIR; fi
  if [[ -n "${WEIGHTS_DIR:-}" && -z "${WEIGHTS+set}" ]]; then
    export WEIGHTS="${WEIGHTS_DIR}/R-50.pkl"  # the site's weights folder, as the image binds it
  fi
fi

mapfile -t hosts < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}" 2> /dev/null || hostname)
if [[ "${#hosts[@]}" -eq 0 ]]; then hosts=("$(hostname)"); fi
# sbatch exports the submitting shell's environment: a MASTER_ADDR left there for a one-node test (127.0.0.1,
# localhost) would send every other node's ranks to their own loopback, a hang until the rendezvous times out
if [[ "${#hosts[@]}" -gt 1 && "${MASTER_ADDR:-}" =~ ^(127\.|localhost$|::1$|0\.0\.0\.0$) ]]; then
  fail "${EXIT_BAD_INPUT}" "MASTER_ADDR=${MASTER_ADDR} (from the environment sbatch passed on) is a loopback address: the job's other $(( ${#hosts[@]} - 1 )) nodes cannot reach it; unset it (the default is the job's first node, ${hosts[0]})"
fi
export MASTER_ADDR="${MASTER_ADDR:-${hosts[0]}}"
port0="${MASTER_PORT:-$((29500 + JOBID % 1000))}"
read -r -a srun_extra <<< "${SRUN_ARGS:-}"
# the compliance checker reads an MLLOG line only where it begins the line: srun's --label (-l, in a cluster of
# srun's flags without a value, or an abbreviation), or SLURM_LABELIO, would prefix every line
for arg in "${srun_extra[@]}"; do
  if [[ "${arg}" =~ ^--lab(e|el)?(=.*)?$ || "${arg}" =~ ^-[EHOQVXZhksuv]*l[EHOQVXZhksuv]*$ ]]; then
    fail "${EXIT_BAD_INPUT}" "SRUN_ARGS='${SRUN_ARGS}': ${arg} prefixes every output line with its task number, and the compliance checker reads the MLLOG lines of result_<k>.txt only where they begin the line (a run would have none); drop it"
  fi
done
if [[ -n "${SLURM_LABELIO:-}" && "${SLURM_LABELIO}" != 0 ]]; then
  fail "${EXIT_BAD_INPUT}" "SLURM_LABELIO=${SLURM_LABELIO} (srun's --label) prefixes every output line with its task number, and the compliance checker reads the MLLOG lines of result_<k>.txt only where they begin the line (a run would have none); unset it"
fi
# One task per node: --ntasks too, since the job's SLURM_NTASKS would otherwise spread its count over fewer nodes.
srun_on() {  # the srun command line for one task on each of the first $1 nodes (sets the array srun_cmd)
  # --export=ALL: a job submitted with --export=NONE hands that to every srun in it (SLURM_EXPORT_ENV)
  local host_env=()
  if [[ "${#container_opts[@]}" -gt 0 ]]; then host_env=("${pyxis_host_env[@]}"); fi
  srun_cmd=("${host_env[@]}" srun "--nodes=$1" "--ntasks=$1" --ntasks-per-node=1 --kill-on-bad-exit=1 --cpu-bind=none --export=ALL
            "${srun_extra[@]}" "${container_opts[@]}")
}
container_opts=()
pyxis_host_env=()

# How one task runs a command (on the batch host, or on every node under srun).
in_image=()
case "${CONTAINER_RUNTIME}" in
  none) ;;
  singularity | apptainer) in_image=("${REPO}/slurm/in_container.sh") ;;
  pyxis)  # the job's environment goes in as it is, the image's own (its Docker ENV) over it: the host's DATADIR
    #       and LOGDIR are not paths in there, nor its Python (a PYTHON or PYTHONPATH set for CONTAINER=none runs),
    #       which srun leaves behind (unset inside, the image's own PYTHONPATH would go too); no user site, as
    #       in_container.sh
    pyxis_host_env=(env -u PYTHON -u PYTHONPATH -u PYTHONHOME)
    in_image=(env PYTHONNOUSERSITE=1 DATADIR=/data LOGDIR=/results)
    container_opts=("--container-image=${CONTAINER}" "--container-mounts=${CONTAINER_BINDS}"
                    --container-workdir=/workspace/object_detection --no-container-mount-home) ;;
esac
run_cmd=("${in_image[@]}" ./run_and_time.sh)
python=python  # the image's
if [[ "${CONTAINER_RUNTIME}" == none ]]; then
  run_cmd=("${REPO}/run_and_time.sh")
  python="${PYTHON:-python3}"
fi

# gpu-check on several nodes (slurm/gpu_check.sbatch): its training iterations across nodes are a check, not a
# result. They keep the system config's images per GPU (its memory, its step) at this job's process count: its
# global batches (SOLVER/TEST.IMS_PER_BATCH of EXTRA_CONFIG) scaled, and the recipe not judged against the RCPs
# (a trial's job judges it). Judged as the config is, a 1-node config on 2 nodes was a refused recipe (exit 10).
check_overrides=()
if [[ "${GPU_CHECK:-0}" == 1 && "${NNODES}" -gt 1 ]]; then
  export ALLOW_NON_RCP=1
  config_procs=$(( ${DGXNNODES:-1} * ${DGXNGPU:-1} ))
  job_procs=$(( NNODES * ${NPROC_PER_NODE:-${DGXNGPU:-1}} ))
  for key in SOLVER.IMS_PER_BATCH TEST.IMS_PER_BATCH; do
    pattern="[[:space:]]${key//./\\.}[[:space:]]+([0-9]+)[[:space:]]"
    if [[ " ${EXTRA_CONFIG:-} " =~ ${pattern} ]] && (( BASH_REMATCH[1] % config_procs == 0 )); then
      check_overrides+=("${key}" "$(( BASH_REMATCH[1] / config_procs * job_procs ))")
    fi
  done
  echo "run_experiments: gpu-check across ${NNODES} nodes at the config's images per GPU" \
       "(${check_overrides[*]:-its own batches}); the recipe not judged against the RCPs"
fi

# ------------------------------------------------------------------------------ make gpu-check (GPU_CHECK=1)
if [[ "${GPU_CHECK:-0}" == 1 ]]; then  # slurm/gpu_check.sbatch: the node's stages in the image, into LOGDIR
  gpu_check_rc=0
  # the report's stack names the image it ran in (in_container.sh passes MASKRCNN_* into it)
  if [[ "${CONTAINER_RUNTIME}" != none ]]; then export MASKRCNN_GPU_CHECK_IMAGE="${CONTAINER}"; fi
  srun_on 1
  rm -f "${LOGDIR}/gpu-check/summary.json"
  "${srun_cmd[@]}" "${in_image[@]}" "${python}" tools/gpu_check.py \
    --out "$([[ "${CONTAINER_RUNTIME}" == none ]] && echo "${LOGDIR}" || echo /results)/gpu-check" ||
    gpu_check_rc=$?
  echo "run_experiments: make gpu-check exit code ${gpu_check_rc} (report under ${LOGDIR}/gpu-check)"
  # its projected times to train, where the next jobs look for them (slurm/projection.sh), replaced whole
  projection_dir="${RESULTS_ROOT:-${REPO}/results}/gpu-check"
  if [[ -f "${LOGDIR}/gpu-check/projection.json" && "${LOGDIR}/gpu-check" != "${projection_dir}" ]]; then
    mkdir -p "${projection_dir}"
    cp "${LOGDIR}/gpu-check/projection.json" "${projection_dir}/.projection.json.tmp"
    mv "${projection_dir}/.projection.json.tmp" "${projection_dir}/projection.json"
    echo "run_experiments: the next jobs take DGXRUNMINUTES from ${projection_dir}/projection.json"
  elif [[ "${LOGDIR}/gpu-check" != "${projection_dir}" && -f "${projection_dir}/projection.json" ]]; then
    # this check projected nothing (no step figure, no projection): an earlier node's or image's must not go on
    # setting the next jobs' trial limits
    rm -f "${projection_dir}/projection.json"
    echo "run_experiments: this gpu-check wrote no projection: ${projection_dir}/projection.json (an earlier one) removed; the next jobs take DGXRUNMINUTES from their config"
  fi
  # A check that failed or ran out of time still wrote the report (summary.json): the checks across nodes run
  # anyway, they are what this allocation is for; the job's exit code keeps the failure. No report: gpu-check
  # itself failed (no GPU, a bad argument), the line above says why.
  if [[ "${gpu_check_rc}" -ne 0 && ! -f "${LOGDIR}/gpu-check/summary.json" ]]; then exit "${gpu_check_rc}"; fi
fi

# ------------------------------------------------------------------------------ preflight (in the image)
# The recipe, the batch against the processes, the GPUs, the data and the weights, judged once for all trials
# before any node trains (tools/preflight.py through run_and_time.sh; its exit code names the cause).
preflight_rc=0
if [[ "${CONTAINER_RUNTIME}" == pyxis ]]; then
  srun_on 1
  PREFLIGHT_ONLY=1 PREFLIGHT_NNODES="${NNODES}" "${srun_cmd[@]}" "${run_cmd[@]}" "${check_overrides[@]}" ||
    preflight_rc=$?  # a 1-node step judging the job's nodes
else
  PREFLIGHT_ONLY=1 PREFLIGHT_NNODES="${NNODES}" "${run_cmd[@]}" "${check_overrides[@]}" || preflight_rc=$?
fi
if [[ "${preflight_rc}" -ne 0 ]]; then
  echo "run_experiments: the preflight failed with exit code ${preflight_rc} (the line above says" \
       "why; codes: python -m maskrcnn_benchmark.cli.exit_codes); no trial started" >&2
  exit "${preflight_rc}"
fi
export PREFLIGHT_DONE=1

# ------------------------------------------------------------------------------ interconnect (multi-node)
if [[ "${NCCL_CHECK:-$([[ ${NNODES} -gt 1 ]] && echo 1 || echo 0)}" == 1 && "${NNODES}" -gt 1 ]]; then
  check_nodes=$(( NNODES < 2 ? NNODES : 2 ))
  echo "run_experiments: all-reduce across ${check_nodes} nodes before the first trial (NCCL_CHECK=0 skips it)"
  srun_on "${check_nodes}"
  nccl_rc=0
  MASTER_PORT="$((port0 + 999))" "${srun_cmd[@]}" "${in_image[@]}" "${python}" -m bind_launch \
    "--nproc_per_node=${NPROC_PER_NODE:-${DGXNGPU:-1}}" bench/allreduce.py --launched --mbytes "${NCCL_CHECK_MB:-64}" \
    --iters 5 --min-busbw "${NCCL_MIN_BUSBW:-0}" 2>&1 | tee "${LOGDIR}/nccl_check.log" || nccl_rc=$?
  if [[ "${GPU_CHECK:-0}" == 1 ]]; then  # gpu-check judges it in its report (below), with the training step
    mkdir -p "${LOGDIR}/gpu-check"
    mv "${LOGDIR}/nccl_check.log" "${LOGDIR}/gpu-check/allreduce_2node.log"
    echo "${nccl_rc}" > "${LOGDIR}/gpu-check/allreduce_2node.rc"
    nccl_rc=0
  fi
  if [[ "${nccl_rc}" -ne 0 ]]; then
    echo "error: the all-reduce across nodes failed (exit ${nccl_rc}): check NCCL_SOCKET_IFNAME, NCCL_IB_HCA and" \
         "the fabric before spending the trials" >&2
    exit "${nccl_rc}"
  fi
fi

# ------------------------------------------------------------------------------ gpu-check across nodes (GPU_CHECK=1)
# slurm/gpu_check.sbatch: a 20-iteration training run on two nodes (the system's recipe and data, through
# run_and_time.sh as a trial runs), then tools/gpu_check.py --across-nodes judges it and the all-reduce above
# against NCCL_MIN_BUSBW and adds both to the report. The job's exit code: its, else the node checks'.
if [[ "${GPU_CHECK:-0}" == 1 ]]; then
  mkdir -p "${LOGDIR}/gpu-check"
  if [[ "${NNODES}" -gt 1 ]]; then
    echo "run_experiments: gpu-check: 20 training iterations on 2 nodes"
    srun_on 2
    train2_rc=0
    MASTER_PORT="$((port0 + 998))" TRIAL_NAME=gpu-check/training_2node NOT_CONVERGED_EXIT_CODE=0 \
      "${srun_cmd[@]}" "${run_cmd[@]}" "${check_overrides[@]}" SOLVER.MAX_ITER 20 2>&1 | tee "${LOGDIR}/gpu-check/training_2node.log" ||
      train2_rc=$?
    echo "${train2_rc}" > "${LOGDIR}/gpu-check/training_2node.rc"
  fi
  across_rc=0
  srun_on 1
  "${srun_cmd[@]}" "${in_image[@]}" "${python}" tools/gpu_check.py --across-nodes --min-busbw "${NCCL_MIN_BUSBW:-0}" \
    --out "$([[ "${CONTAINER_RUNTIME}" == none ]] && echo "${LOGDIR}" || echo /results)/gpu-check" || across_rc=$?
  echo "run_experiments: gpu-check across nodes exit code ${across_rc}, on the node ${gpu_check_rc}: the job exits" \
       "$(( across_rc != 0 ? across_rc : gpu_check_rc )) (report ${LOGDIR}/gpu-check/report.md)"
  exit "$(( across_rc != 0 ? across_rc : gpu_check_rc ))"
fi

# ------------------------------------------------------------------------------ the trials
# Each trial has its own time limit: Slurm sends SIGTERM (the trainer logs run_stop aborted and exits), then
# SIGKILL after KillWait, and the next trial starts; one hung trial cannot eat the others' time.
container_opts=()  # caches are dropped on the hosts, never in the container
srun_on "${NNODES}"
# a time limit of its own: sync waits for every mounted file system, and a hung NFS or Lustre client would hold the
# job until its end
cache_cmd=("${srun_cmd[@]}" --time="${CACHE_DROP_MINUTES:-5}" bash -c "${DROP_CACHES_CMD}")
[[ "${CONTAINER_RUNTIME}" != pyxis ]] || container_opts=("--container-image=${CONTAINER}"
  "--container-mounts=${CONTAINER_BINDS}" --container-workdir=/workspace/object_detection --no-container-mount-home)
srun_on "${NNODES}"
train_cmd=("${srun_cmd[@]}")
if [[ -n "${TRIAL_MINUTES:-}" ]]; then train_cmd+=("--time=${TRIAL_MINUTES}"); fi
# MLPerf: "You must flush the cache or restart the system prior to benchmarking"; a log saying cache_clear false
# cannot be submitted, so a job that cannot drop the caches stops here, before any trial is spent.
if [[ "${CLEAR_CACHES}" == 1 ]]; then
  if ! cache_err="$("${cache_cmd[@]}" 2>&1)"; then
    # the command's own last line, not srun's summary ("srun: error: HOST: task 0: Exited with exit code 1")
    fail "${EXIT_CACHES_NOT_DROPPED}" "dropping the page cache failed on the nodes (DROP_CACHES_CMD='${DROP_CACHES_CMD}': $(grep -v '^srun: ' <<< "${cache_err}" | tail -n 1)): MLPerf requires it before every run; run the job as root, set DROP_CACHES_CMD='sudo /sbin/sysctl vm.drop_caches=3', or CLEAR_CACHES=0 for runs not to be submitted (their logs say cache_clear false)"
  fi
else
  echo "run_experiments: WARNING: CLEAR_CACHES=0: the page cache is not dropped before the trials; their logs say" \
       "cache_clear false, which MLPerf does not accept for a submission" >&2
fi
next_index() {  # the first k >= $1 with no result_<k>.txt: a result file is never overwritten
  local k="$1"
  while [[ -e "${LOGDIR}/result_${k}.txt" ]]; do k=$((k + 1)); done
  echo "${k}"
}
claim_index() {  # next_index, its result file created by this job (O_EXCL): two jobs on one LOGDIR never share one
  local k="$1"
  until (set -o noclobber; : > "${LOGDIR}/result_${k}.txt") 2> /dev/null; do
    [[ -e "${LOGDIR}/result_${k}.txt" ]] || return 1  # not taken, but not writable: no other index would be
    k=$((k + 1))
  done
  echo "${k}"
}
# The trials that fit in the time the job has left (its --time may be another system's: the batch scripts' own
# is one default): a trial Slurm kills at the job's end is an aborted run, so it is not started. The results
# continue at the next free index when the job is submitted again with this LOGDIR (the default is per job).
minutes_left() {  # the job's time left in whole minutes (squeue %L: [days-]hours:minutes:seconds), empty if unknown
  local left
  left="$(timeout 20 squeue -h -j "${SLURM_JOB_ID:-}" -o %L 2> /dev/null | head -n 1)" || return 0
  # UNLIMITED, NOT_SET, INVALID or nothing: unknown
  if [[ "${left}" =~ ^(([0-9]+)-)?(([0-9]+):)?([0-9]+):([0-9]+)$ ]]; then
    echo $(( 10#${BASH_REMATCH[2]:-0} * 1440 + 10#${BASH_REMATCH[4]:-0} * 60 + 10#${BASH_REMATCH[5]} ))
  fi
}
if [[ -n "${SLURM_JOB_ID:-}" && -n "${TRIAL_MINUTES:-}" ]]; then
  left="$(minutes_left)"
  if [[ -n "${left}" ]]; then
    fit=$(( left / TRIAL_MINUTES ))
    if [[ "${fit}" -lt 1 ]]; then
      fail "${EXIT_BAD_INPUT}" "the job has ${left} min left, less than one trial of ${TRIAL_MINUTES} min (TRIAL_MINUTES, config_${DGXSYSTEM}.sh): submit with --time=${WALLTIME:-$(( NEXP * TRIAL_MINUTES + 15 ))} (WALLTIME) or through slurm/submit.sh, which takes it from the config"
    elif [[ "${fit}" -lt "${NEXP}" ]]; then
      echo "run_experiments: WARNING: the job has ${left} min left after $(( (SECONDS + 59) / 60 )) min of checks:" \
           "${fit} of the ${NEXP} trials of ${TRIAL_MINUTES} min fit; running ${fit} (submit again with" \
           "LOGDIR=${LOGDIR} NEXP=$(( NEXP - fit )) for the rest: they continue at the next free index there)" >&2
      NEXP="${fit}"
    fi
  fi
fi
index="$(next_index "${FIRST_INDEX:-0}")"
echo "run_experiments: job ${JOBID} nodes=${NNODES} (${hosts[*]}) system=${DGXSYSTEM} nexp=${NEXP}" \
     "first result_${index}.txt"
echo "run_experiments: master=${MASTER_ADDR} logdir=${LOGDIR} container=${CONTAINER} runtime=${CONTAINER_RUNTIME}" \
     "trial limit=${TRIAL_MINUTES:-none} min"
failures=0
# scancel or the job's time limit signals every process of the batch step: this shell, with a trap, waits for the
# running trial's pipeline to end (its srun passes the signal to the trainer, which logs run_stop; tee, ignoring it,
# copies those last lines into result_<k>.txt), then starts no further trial. Without it the shell died at once and
# slurmstepd killed what was left of the step, tee with it.
stopped=""
trap 'stopped=TERM' TERM
trap 'stopped=INT' INT
status=0
summary=()
for ((i = 0; i < NEXP; i++)); do
  if [[ "${failures}" -ge 2 ]]; then
    echo "run_experiments: ${failures} trials failed: the set cannot pass MLPerf review (one failure of five is" \
         "allowed); no further trial started" >&2
    break
  fi
  if [[ "${i}" -gt 0 && -n "${SLURM_JOB_ID:-}" && -n "${TRIAL_MINUTES:-}" ]]; then  # asked again: cache drops
    left="$(minutes_left)"  # and trials near their limit may have used the margin the count above left
    need="${TRIAL_MINUTES}" what="its limit"
    if [[ "${CLEAR_CACHES}" == 1 ]]; then  # the trial's cache drop comes first
      need=$(( TRIAL_MINUTES + ${CACHE_DROP_MINUTES:-5} )) what="its limit and its cache drop's"
    fi
    if [[ -n "${left}" && "${left}" -lt "${need}" ]]; then
      echo "run_experiments: WARNING: the job has ${left} min left, less than the ${need} min a trial may take" \
           "(${what}):" \
           "trial $((i + 1)) of ${NEXP} not started (submit again with LOGDIR=${LOGDIR} NEXP=$(( NEXP - i )) for" \
           "the rest)" >&2
      break
    fi
  fi
  index="$(claim_index "${index}")" ||
    fail "${EXIT_BIND_SOURCE_MISSING}" "cannot create ${LOGDIR}/result_${index}.txt (LOGDIR no longer writable, or its disk or inode quota full)"
  export MASTER_PORT=$((port0 + i)) NOT_CONVERGED_EXIT_CODE=0
  export TRIAL_NAME="trial_${index}"
  log="${LOGDIR}/result_${index}.txt"
  rc=0
  t0=$(date +%s)
  {
    echo "Beginning trial $((i + 1)) of ${NEXP}"
    # The trainer logs cache_clear once, true only when the caches were really dropped on every node.
    export MLPERF_CACHE_CLEARED=0
    if [[ "${CLEAR_CACHES}" == 1 ]]; then
      if "${cache_cmd[@]}"; then
        export MLPERF_CACHE_CLEARED=1
      else  # a log saying cache_clear false cannot be submitted: the trial is not run, and counts as failed
        echo "run_experiments: dropping the page cache failed on the nodes (DROP_CACHES_CMD, above): trial" \
             "$((i + 1)) is not run (a log saying cache_clear false cannot be submitted)" >&2
        exit "${EXIT_CACHES_NOT_DROPPED}"
      fi
    fi
    "${train_cmd[@]}" "${run_cmd[@]}"
    # tee ignores SIGTERM (scancel, the job's time limit: every process of the batch step gets it) and copies
    # the trial's output to its end: the lines the trainer writes as it stops (run_stop) reach result_<k>.txt
  } 2>&1 | (trap '' TERM; exec tee "${log}") || rc=$?
  # Not converged is an outcome of every node together: the nodes exit 0 for it (NOT_CONVERGED_EXIT_CODE, so that
  # srun's --kill-on-bad-exit does not kill the others mid-exit) and say so in the log.
  if [[ "${rc}" -eq 0 ]] && grep -q "^run_and_time: not converged" "${log}"; then rc=3; fi
  echo "run_experiments: trial $((i + 1)) exit code ${rc} in $(( $(date +%s) - t0 )) s, log ${log}"
  summary+=("result_${index}.txt: ${rc}")
  if [[ "${rc}" -ne 0 ]]; then
    # the job's code: a failure's own, not "not converged" (3, the one run MLPerf allows) over a crash
    if [[ "${status}" -eq 0 || "${status}" -eq 3 ]]; then status="${rc}"; fi
    failures=$((failures + 1))
    failed_trial=$((i + 1))
  fi
  index=$((index + 1))
  if [[ -n "${stopped}" ]]; then
    echo "run_experiments: stopped (SIG${stopped}) during trial $((i + 1)) of ${NEXP}: no further trial" >&2
    if [[ "${status}" -eq 0 ]]; then  # 128 + the signal, as the trainer's own stop
      if [[ "${stopped}" == TERM ]]; then status=143; else status=130; fi
    fi
    break
  fi
done
if [[ "${#summary[@]}" -gt 0 ]]; then
  echo "run_experiments: trials (exit codes): ${summary[*]}" | tee -a "${LOGDIR}/trials.txt" || true
fi
# MLPerf accepts one run of five that does not converge: such a set passes review, and the job says so with exit 0
# (the next step, the submission, can follow). Any other failure keeps its code.
if [[ "${failures}" -eq 1 && "${status}" -eq 3 && "${NEXP}" -ge 5 ]]; then
  echo "run_experiments: 1 of ${NEXP} trials did not converge (trial ${failed_trial}): MLPerf allows one; the job" \
       "exits 0"
  status=0
fi

if [[ "${PILOT:-0}" == 1 ]]; then  # the measured times, as the DGXRUNMINUTES/DGXINITMINUTES to set
  # with the trials' Python (the image's; the host's python3 may be older than the package: RHEL 7/8 have 3.6)
  pilot_cmd=("${in_image[@]}" "${python}" -m mlperf_review.pilot)
  if [[ "${CONTAINER_RUNTIME}" == none ]]; then
    PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}" "${pilot_cmd[@]}" "${log}" || true
  else  # LOGDIR is /results in there; under pyxis only srun enters the image
    if [[ "${CONTAINER_RUNTIME}" == pyxis ]]; then srun_on 1; pilot_cmd=("${srun_cmd[@]}" "${pilot_cmd[@]}"); fi
    "${pilot_cmd[@]}" "/results/$(basename "${log}")" || true
  fi
fi
exit "${status}"
