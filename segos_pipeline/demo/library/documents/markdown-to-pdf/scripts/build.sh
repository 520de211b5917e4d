#!/usr/bin/env bash
# usage: build.sh <input.md> <output.pdf> [engine]
set -euo pipefail
in="$1"; out="$2"; engine="${3:-xelatex}"
cd "$(dirname "$in")"
args=(--toc --number-sections -V geometry:margin=2.2cm -V mainfont="Noto Sans"
      --highlight-style=tango --resource-path=.)
if [[ "$engine" == "weasyprint" ]]; then
  args+=(--pdf-engine=weasyprint --css="${CSS:-style.css}")
else
  args+=(--pdf-engine=xelatex)
fi
pandoc "$(basename "$in")" "${args[@]}" -o "$out"
pdfinfo "$out" | grep -E '^Pages:'
