#!/bin/bash
# pairs.sh BASE_TREE NEW_TREE OUT [STRATEGIES] [CASES]: per case and strategy one pair of processes run at the same time
# (../scale_cpu_2026-12-02c/pair.sh): the base tree against the new tree, same strategy; a "# time load case strategy"
# line before each pair.
here=$(cd "$(dirname "$0")" && pwd)
pair="$here/../scale_cpu_2026-12-02c/pair.sh"
base=$1; new=$2; out=$3
strategies=${4:-"greedy eqsat"}
cases=${5:-"branches:50000 rec:50000 tangle:50000"}
for c in $cases; do
  for s in $strategies; do
    echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $c $s" >> "$out"
    "$pair" "$c" "$base:$s:base_$s" "$new:$s:new_$s" >> "$out"
  done
done
