#!/usr/bin/env bash
# usage: compress.sh <in_dir> <out_dir> [budget_kb]
set -euo pipefail
in="$1"; out="$2"; budget=$(( ${3:-150} * 1024 ))
mkdir -p "$out"
for f in "$in"/*.{jpg,jpeg,png}; do
  [[ -e "$f" ]] || continue
  base=$(basename "${f%.*}")
  lo=40; hi=85; best=$lo
  while (( lo <= hi )); do
    q=$(( (lo + hi) / 2 ))
    cwebp -quiet -q "$q" -metadata none "$f" -o "/tmp/$base.webp"
    if (( $(stat -c %s "/tmp/$base.webp") <= budget )); then best=$q; lo=$(( q + 1 )); else hi=$(( q - 1 )); fi
  done
  cwebp -quiet -q "$best" -metadata none "$f" -o "$out/$base.webp"
  printf '%s\t%s\t%s\tq=%s\n' "$base" "$(stat -c %s "$f")" "$(stat -c %s "$out/$base.webp")" "$best"
done
