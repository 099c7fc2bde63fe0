#!/bin/bash
# small.sh TREE OUT CASES...: ../scale_cpu_2026-12-02c/one.py per case and strategy (greedy, eqsat), one after another, niced
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
tree=$1; out=$2; shift 2
for c in "$@"; do for s in greedy eqsat; do
  ( cd "$tree" && PYTHONPATH=src:bridge:bench timeout 1200 nice $py "$here/../scale_cpu_2026-12-02c/one.py" "$c" "$s" 1 2>/dev/null \
      | grep '^@@' | sed "s/^@@//" ) >> "$out"
done; done
