#!/usr/bin/env python3
"""Delete near-black and blurry frames from a thumbnail folder."""
import pathlib
import sys

import cv2

folder = pathlib.Path(sys.argv[1])
kept = 0
for p in sorted(folder.glob("thumb_*.jpg")):
    img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
    if img is None or img.mean() < 16 or cv2.Laplacian(img, cv2.CV_64F).var() < 100:
        p.unlink()
        continue
    kept += 1
print(f"kept {kept} thumbnails in {folder}")
