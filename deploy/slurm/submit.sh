#!/usr/bin/env bash
# Grade a class on a Slurm cluster: a job array of SHARDS tasks (each
# `attn-grade batch --shard K/SHARDS`, grade-class.sbatch), then a merge job
# that runs after all of them, whatever their outcome (merge.sbatch).
#
#   deploy/slurm/submit.sh SUBMISSIONS [SHARDS] [sbatch options for the array ...]
#   OUT=/scratch/me/grades EXERCISES="ex07_flash_attention" deploy/slurm/submit.sh subs 8 --partition=a100
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 SUBMISSIONS [SHARDS] [sbatch options for the grading tasks ...]" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SUBMISSIONS="$1"
export OUT="${OUT:-grades}"
shards="${2:-4}"
shift $(($# < 2 ? $# : 2))
mkdir -p "$OUT"
array="$(sbatch --parsable --export=ALL --array="1-$shards" "$@" "$here/grade-class.sbatch")"
array="${array%%;*}"   # "jobid;cluster" on a multi-cluster site
merge="$(sbatch --parsable --export=ALL --dependency="afterany:$array" "$here/merge.sbatch")"
merge="${merge%%;*}"
echo "grading $SUBMISSIONS: job array $array ($shards tasks), then merge job $merge;" \
     "the class's CSV will be $OUT/grades.csv"
