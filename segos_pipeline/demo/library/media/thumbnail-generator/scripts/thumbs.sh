#!/usr/bin/env bash
# usage: thumbs.sh <video> <out_dir> [count]
set -euo pipefail
video="$1"; out="$2"; n="${3:-24}"
mkdir -p "$out"
dur=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$video")
step=$(python3 -c "print(max(1.0, $dur / ($n + 1)))")
for i in $(seq 1 "$n"); do
  t=$(python3 -c "print(round($step * $i, 2))")
  name=$(python3 -c "import time; print(time.strftime('%H%M%S', time.gmtime($t)))")
  ffmpeg -nostdin -loglevel error -y -ss "$t" -i "$video" -frames:v 1 \
    -vf "scale=640:-2" -q:v 3 "$out/thumb_${name}.jpg"
done
python3 "$(dirname "$0")/filter_frames.py" "$out"
