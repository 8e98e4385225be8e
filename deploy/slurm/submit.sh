#!/usr/bin/env bash
# Grade a class on a Slurm cluster: a job array of SHARDS tasks (each
# `attn-grade batch --shard K/SHARDS`, grade-class.sbatch), then a merge job
# that runs after all of them, whatever their outcome (merge.sbatch).
#
#   deploy/slurm/submit.sh SUBMISSIONS [SHARDS] [sbatch options ...] [-- batch options ...]
#   OUT=/scratch/me/grades EXERCISES="ex07_flash_attention" deploy/slurm/submit.sh subs 8 --partition=a100
#   deploy/slurm/submit.sh subs 4 -- --roster roster.csv --due 2026-12-15T23:59 \
#       --late-policy "10%/day,max 3" --submitted-times times.csv --extensions ext.csv --seed 7
#
# Everything after `--` goes to every task's `attn-grade batch` as it is (the
# same options as `batch` itself: roster, due time, late policy, submission
# times, extensions, seed, exercises), kept NUL-separated in $OUT/batch-args
# so that no quoting is lost on the way.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 SUBMISSIONS [SHARDS] [sbatch options ...] [-- attn-grade batch options ...]" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SUBMISSIONS="$1"
export OUT="${OUT:-grades}"
shards="${2:-4}"
shift $(($# < 2 ? $# : 2))
[ "$shards" = "--" ] && { shards=4; set -- -- "$@"; }
sbatch_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sbatch_args+=("$1"); shift; done
[ $# -gt 0 ] && shift   # the "--"
mkdir -p "$OUT"
# The batch options for every task, NUL-separated (grade-class.sbatch reads them back).
if [ $# -gt 0 ]; then printf '%s\0' "$@" > "$OUT/batch-args"; else : > "$OUT/batch-args"; fi
array="$(sbatch --parsable --export=ALL --array="1-$shards" ${sbatch_args[@]+"${sbatch_args[@]}"} \
    "$here/grade-class.sbatch")"
array="${array%%;*}"   # "jobid;cluster" on a multi-cluster site
merge="$(sbatch --parsable --export=ALL --dependency="afterany:$array" "$here/merge.sbatch")"
merge="${merge%%;*}"
echo "grading $SUBMISSIONS: job array $array ($shards tasks), then merge job $merge;" \
     "the class's CSV will be $OUT/grades.csv"
