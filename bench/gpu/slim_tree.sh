#!/bin/bash
# The device tool copies the working tree to the GPU machine, 64 MiB at most with the carried .device/ included.
# When the tracked files push past that (check: git ls-files -z | xargs -0 du -cb | tail -n 1; du -sh .device),
# move the large committed benchmark results out first, from the repository root:
#   bash bench/gpu/slim_tree.sh stash     # tracked files under bench/results/ over 150 kB -> a tarball outside
#   ... run bench/gpu/run_gpu.sh on the device (carry [".device"]) ...
#   bash bench/gpu/slim_tree.sh restore   # puts them back
# Nothing the GPU script runs reads those files (it runs tests/test_parity.py, bench/gpu/*, portkern bench/train).
set -euo pipefail
cd "$(dirname "$0")/../.."
stash=${PK_SLIM_STASH:-${TMPDIR:-/tmp}/portkern-results-stash.tar}
case "${1:-}" in
  stash)
    [ -e "$stash" ] && { echo "slim_tree: $stash exists (restore it first)"; exit 1; }
    list=$(mktemp)
    git ls-files -z bench/results | xargs -0 du -b | awk '$1 > 150000 {print $2}' >"$list"
    tar cf "$stash" -T "$list"
    xargs rm -f <"$list"
    echo "slim_tree: $(wc -l <"$list") files ($(du -sh "$stash" | cut -f1)) moved to $stash;" \
      "the tree's tracked files now $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1) bytes"
    rm -f "$list"
    ;;
  restore)
    [ -e "$stash" ] || { echo "slim_tree: no $stash"; exit 1; }
    tar xf "$stash" && rm -f "$stash"
    git status --short bench/results | head -n 5
    echo "slim_tree: restored"
    ;;
  *) echo "usage: bash bench/gpu/slim_tree.sh stash|restore"; exit 2 ;;
esac
