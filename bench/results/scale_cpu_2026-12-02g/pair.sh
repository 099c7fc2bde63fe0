#!/bin/bash
# pair.sh SPEC TREE_A:STRATEGY_A:LABEL_A TREE_B:STRATEGY_B:LABEL_B: optimize SPEC in two processes at once (same
# load for both), one per (tree, strategy); print one line "LABEL {json}" each, from one.py.
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
spec=$1; shift
for side in "$@"; do
  tree=${side%%:*}; rest=${side#*:}; strat=${rest%%:*}; label=${rest#*:}
  ( cd "$tree" && PYTHONPATH=src:bridge:bench timeout 1800 $py "$here/one.py" "$spec" "$strat" 1 2>/dev/null \
      | grep '^@@' | sed "s/^@@/$label /" ) > "/tmp/pair_$label.$$" &
done
wait
for side in "$@"; do label=${side##*:}; cat "/tmp/pair_$label.$$"; rm -f "/tmp/pair_$label.$$"; done
