#!/bin/bash
# sweep.sh BASE_TREE NEW_TREE OUT: per case, two pairs of processes (pair.sh): eqsat base against eqsat new (the
# before/after; left out with RATIO_ONLY=1), then greedy new against eqsat new (the ratio); a "# time load case" line
# before each case. CASES overrides the case list.
here=$(cd "$(dirname "$0")" && pwd)
base=$1; new=$2; out=$3
cases=${CASES:-"dhen launch tangle rec:1000 tangle:1000 branches:1000 rec:5000 tangle:5000 branches:5000
rec:20000 tangle:20000 branches:20000 rec:50000 tangle:50000 branches:50000"}
for c in $cases; do
  echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $c" >> "$out"
  [ -z "$RATIO_ONLY" ] && "$here/pair.sh" "$c" "$base:eqsat:base_eqsat" "$new:eqsat:new_eqsat" >> "$out"
  "$here/pair.sh" "$c" "$new:greedy:greedy" "$new:eqsat:new_eqsat2" >> "$out"
done
