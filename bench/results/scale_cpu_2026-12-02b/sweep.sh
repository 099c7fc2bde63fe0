#!/bin/bash
# sweep.sh BASE_TREE NEW_TREE OUT: every case of this README through ab.sh, a "# time load case" line before each
here=$(cd "$(dirname "$0")" && pwd)
base=$1; new=$2; out=$3
cases="branches:1000:eqsat rec:1000:eqsat tangle:1000:eqsat launch:eqsat dhen:eqsat tangle:eqsat
branches:5000:eqsat branches:5000:greedy rec:5000:eqsat tangle:5000:eqsat
branches:20000:eqsat branches:20000:greedy rec:20000:eqsat tangle:20000:eqsat branches:50000:eqsat"
for c in $cases; do
  strat=${c##*:}; spec=${c%:*}
  echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $spec $strat" >> "$out"
  "$here/ab.sh" "$base" "$new" "$spec" "$strat" 1 >> "$out"
done
