#!/usr/bin/env bash
# usage: extract_audio.sh <input> <output.wav> [speech|edit]
set -euo pipefail
in="$1"; out="$2"; profile="${3:-speech}"
stream=$(ffprobe -v error -select_streams a -show_entries stream=index -of csv=p=0 "$in" | head -n1)
if [[ -z "$stream" ]]; then
  echo "no audio stream in $in" >&2; exit 2
fi
if [[ "$profile" == "speech" ]]; then
  ffmpeg -nostdin -y -i "$in" -map "0:$stream" -vn -ac 1 -ar 16000 -c:a pcm_s16le "$out"
else
  ffmpeg -nostdin -y -i "$in" -map "0:$stream" -vn -ac 2 -ar 48000 -c:a pcm_s24le "$out"
fi
vdur=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$in")
adur=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$out")
echo "audio_wav=$out duration=${adur}s (container ${vdur}s)"
