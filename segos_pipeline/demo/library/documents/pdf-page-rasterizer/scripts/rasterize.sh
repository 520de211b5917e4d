#!/usr/bin/env bash
# usage: rasterize.sh <pdf_path> <out_prefix> [dpi]
set -euo pipefail
pdf="$1"
prefix="$2"
dpi="${3:-300}"
mkdir -p "$(dirname "$prefix")"
if pdffonts "$pdf" 2>/dev/null | tail -n +3 | grep -q .; then
  echo "note: $pdf has embedded fonts; text extraction may work without OCR" >&2
fi
pdftoppm -r "$dpi" -gray -png "$pdf" "$prefix"
ls -1 "$prefix"-*.png | sort -V
