#!/bin/bash
# ab.sh BASE_TREE NEW_TREE SPEC STRATEGY REPEATS: optimize SPEC (family:size) in two processes at once, one per
# frozen tree (same load for both), and print one JSON line each ("base ..." / "new ...") from one.py.
base=$1; new=$2; spec=$3; strat=${4:-eqsat}; reps=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
for side in base new; do
  tree=$([ $side = base ] && echo "$base" || echo "$new")
  ( cd "$tree" && PYTHONPATH=src:bridge:bench timeout 1800 $py "$here/one.py" "$spec" "$strat" "$reps" 2>/dev/null \
      | grep '^@@' | sed "s/^@@/$side /" ) > "/tmp/ab_$side.$$" &
done
wait
cat "/tmp/ab_base.$$" "/tmp/ab_new.$$"; rm -f "/tmp/ab_base.$$" "/tmp/ab_new.$$"
