#!/bin/bash
#SBATCH --job-name=resume-me
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=1
#SBATCH --signal=B:USR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=resume-me-%j.log

export COMPUTEWISE_RUN_NAME=resume-me

# Forward the warning (USR1) and preemption (TERM) signals to the step: it saves and exits 75.
forward() { signalled=1; kill -s "$1" "$step_pid" 2>/dev/null || true; }
trap 'forward USR1' USR1
trap 'forward TERM' TERM
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
  srun python train.py --resume &
else
  srun python train.py &
fi
step_pid=$!
# A trapped signal interrupts wait (status > 128) while the step still runs: wait again.
while :; do
  signalled=0
  wait "$step_pid"
  code=$?
  if [ "$code" -le 128 ] || [ "$signalled" = 0 ]; then break; fi
done
if [ "$code" -eq 75 ] && [ "${SLURM_RESTART_COUNT:-0}" -lt 3 ]; then
  echo "computewise: step exited 75 (checkpoint saved): requeueing job $SLURM_JOB_ID" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$code"
