#!/usr/bin/env python3
import argparse
import json

from faster_whisper import WhisperModel

ap = argparse.ArgumentParser()
ap.add_argument("audio_wav")
ap.add_argument("--model", default="large-v3")
ap.add_argument("--language")
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--out", default="transcript_segments.json")
a = ap.parse_args()

model = WhisperModel(a.model, device="cpu" if a.cpu else "cuda",
                     compute_type="int8" if a.cpu else "float16")
segments, info = model.transcribe(a.audio_wav, language=a.language, vad_filter=True,
                                  word_timestamps=True, beam_size=5)
out = []
for s in segments:
    out.append({"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text.strip(),
                "avg_logprob": s.avg_logprob, "uncertain": s.avg_logprob < -1.0,
                "words": [{"word": w.word, "start": w.start, "end": w.end} for w in s.words or []]})
json.dump({"language": info.language, "language_probability": info.language_probability,
           "segments": out}, open(a.out, "w"), ensure_ascii=False, indent=1)
print(f"{len(out)} segments, language={info.language} ({info.language_probability:.2f})")
