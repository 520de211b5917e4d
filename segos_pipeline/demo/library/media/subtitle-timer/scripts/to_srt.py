#!/usr/bin/env python3
import json
import sys

MAX_CHARS, MAX_CPS, MIN_DUR, GAP = 84, 17, 1.0, 0.08


def ts(t):
    h, rem = divmod(t, 3600)
    m, s = divmod(rem, 60)
    return f"{int(h):02}:{int(m):02}:{int(s):02},{int(round((s % 1) * 1000)):03}"


words = [w for seg in json.load(open(sys.argv[1]))["segments"] for w in seg["words"]]
cues, cur = [], []
for i, w in enumerate(words):
    cur.append(w)
    text = "".join(x["word"] for x in cur).strip()
    nxt = words[i + 1] if i + 1 < len(words) else None
    pause = nxt and nxt["start"] - w["end"] > 0.7
    if not nxt or pause or len(text) > MAX_CHARS - 10 or text.endswith((".", "?", "!")):
        start, end = cur[0]["start"], max(w["end"], cur[0]["start"] + MIN_DUR, cur[0]["start"] + len(text) / MAX_CPS)
        if nxt:
            end = min(end, nxt["start"] - GAP)
        cues.append((start, end, text))
        cur = []
with open(sys.argv[2], "w", encoding="utf-8") as fh:
    for n, (s, e, t) in enumerate(cues, 1):
        fh.write(f"{n}\n{ts(s)} --> {ts(e)}\n{t}\n\n")
print(f"{len(cues)} cues -> {sys.argv[2]}")
