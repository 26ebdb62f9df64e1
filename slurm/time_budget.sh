#!/bin/bash
# Sourced by every config_*.sh after it has set DGXRUNMINUTES (expected minutes to train), DGXINITMINUTES and NEXP:
# a trial gets the training time plus the init allowance, +25 % (Slurm stops a trial at that limit with
# srun --time, and the next one starts); the job asks for NEXP trials + 15 minutes. Either may be set beforehand.
export TRIAL_MINUTES="${TRIAL_MINUTES:-$(( (DGXRUNMINUTES + DGXINITMINUTES) * 5 / 4 ))}"
_job_minutes=$(( NEXP * TRIAL_MINUTES + 15 ))
export WALLTIME="${WALLTIME:-$(printf '%02d:%02d:00' $(( _job_minutes / 60 )) $(( _job_minutes % 60 )))}"
unset _job_minutes
