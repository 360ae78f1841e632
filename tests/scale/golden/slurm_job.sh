#!/bin/bash
#SBATCH --job-name=llama-ft-7b
#SBATCH --gres=gpu:h100:2
#SBATCH --cpus-per-task=8
#SBATCH --mem=65536M
#SBATCH --signal=B:USR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=llama-ft-7b-%j.log
#SBATCH --comment=cost_center=R_D/42,team=nlp

export COMPUTEWISE_RUN_NAME=llama-ft-7b
export COMPUTEWISE_CHECKPOINT_URI=s3://ckpt-bucket/llama-ft-7b
export NCCL_DEBUG=WARN

# Forward the warning (USR1) and preemption (TERM) signals to the step: it saves and exits 75.
forward() { signalled=1; kill -s "$1" "$step_pid" 2>/dev/null || true; }
trap 'forward USR1' USR1
trap 'forward TERM' TERM
srun python -m train --config 'run config.json' &
step_pid=$!
# A trapped signal interrupts wait (status > 128) while the step still runs: wait again.
while :; do
  signalled=0
  wait "$step_pid"
  code=$?
  if [ "$code" -le 128 ] || [ "$signalled" = 0 ]; then break; fi
done
if [ "$code" -eq 75 ] && [ "${SLURM_RESTART_COUNT:-0}" -lt 2 ]; then
  echo "computewise: step exited 75 (checkpoint saved): requeueing job $SLURM_JOB_ID" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$code"
