#!/usr/bin/env bash
# samples/scale-out/slurm.sh: one unit of a Ferry plan per Slurm array task.
#
# On a login node (the plan holds no password; each task reads its own, here from a file only
# its owner can read):
#
#   ferry plan postgres://dba@db/shop postgres://dba@dw/shop --shards 16 --output $HOME/orders-plan.json
#   ferry copy --plan $HOME/orders-plan.json --prepare --password-file $HOME/.ferry-pw
#   units=$(sbatch --parsable --array=0-15%4 samples/scale-out/slurm.sh $HOME/orders-plan.json 16)
#   sbatch --dependency=afterok:$units --wrap "ferry copy --plan $HOME/orders-plan.json --finish --password-file $HOME/.ferry-pw"
#
# For one source snapshot across the tasks (PostgreSQL), make the plan with --hold-snapshot on a
# node that stays up until the array ends (`ferry plan … --hold-snapshot --output FILE &`), and
# stop it (kill -TERM) when the finish job has run. A failed task can be run again alone:
#   sbatch --array=7 samples/scale-out/slurm.sh $HOME/orders-plan.json 16
#
#SBATCH --job-name=ferry-units
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=04:00:00
#SBATCH --output=ferry-unit-%A_%a.log
set -euo pipefail
PLAN=${1:?the plan file}
UNITS=${2:?the number of units in the plan}
exec ferry copy --plan "$PLAN" --shard "${SLURM_ARRAY_TASK_ID:?run as an array job: sbatch --array=0-$((UNITS - 1))}/$UNITS" \
  --password-file "${FERRY_PASSWORD_FILE:-$HOME/.ferry-pw}" --quiet
