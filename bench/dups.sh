#!/usr/bin/env bash
# Repeated code in the production Go files (issue 26): the tracked .go files without _test.go
# and testdata/ are copied to a scratch tree (DUPS_DIR, default /tmp/prod-dups) and read by the
# `duplicates` tool. Its rows are then split in two: pairs whose both sides lie inside a grouped
# `import ( … )` block (the tool passes over `import "x"` lines but not the lines of a group, so
# two files importing the same sorted standard packages make a pair), and the others. It prints
# the two counts, then every other row, then the import-block rows.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${DUPS_DIR:-/tmp/prod-dups}"
rm -rf "$dir" && mkdir -p "$dir"
git ls-files '*.go' | grep -v '_test.go$' | grep -v '/testdata/' | xargs -I{} cp --parents {} "$dir/"
out="$(duplicates --repo "$dir" --most 200 --seconds 200)"
printf '%s\n' "$out" | head -1

# inside FILE:A-B: lines A to B of FILE lie within one grouped import block (the `import (`
# and `)` lines count as within).
inside() {
  local file="${1%:*}" range="${1##*:}"
  awk -v a="${range%-*}" -v b="${range#*-}" '
    start == 0 && /^import[ \t]*\($/ { start = NR; next }
    start && /^\)$/ { if (start <= a && b <= NR) found = 1; start = 0 }
    END { exit !found }' "$dir/$file"
}

imports=() others=()
while read -r row; do
  read -r _ left _ right _ <<<"$row"
  if inside "$left" && inside "$right"; then imports+=("$row"); else others+=("$row"); fi
done < <(printf '%s\n' "$out" | grep '^D[0-9]')
echo "other pairs: ${#others[@]}"
echo "import-block pairs: ${#imports[@]}"
echo "-- other:"
printf '%s\n' "${others[@]}"
echo "-- import-block:"
printf '%s\n' "${imports[@]}"
printf '%s\n' "$out" | grep -E '^(\(|left out:|incomplete:)' || true
