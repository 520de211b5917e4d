#!/usr/bin/env python3
import argparse
import json

import cv2
import numpy as np
import pytesseract


def deskew(gray):
    coords = np.column_stack(np.where(gray < 128))
    angle = cv2.minAreaRect(coords)[-1]
    angle = -(90 + angle) if angle < -45 else -angle
    h, w = gray.shape
    m = cv2.getRotationMatrix2D((w // 2, h // 2), angle, 1.0)
    return cv2.warpAffine(gray, m, (w, h), borderMode=cv2.BORDER_REPLICATE)


ap = argparse.ArgumentParser()
ap.add_argument("images", nargs="+")
ap.add_argument("--lang", default="eng")
ap.add_argument("--out", default="ocr.json")
a = ap.parse_args()
result = []
for page, path in enumerate(a.images, 1):
    gray = deskew(cv2.imread(path, cv2.IMREAD_GRAYSCALE))
    bw = cv2.adaptiveThreshold(gray, 255, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, 31, 10)
    data = pytesseract.image_to_data(bw, lang=a.lang, config="--oem 1 --psm 6",
                                     output_type=pytesseract.Output.DICT)
    words = [{"word": w, "conf": float(c), "page": page,
              "bbox": [data["left"][i], data["top"][i], data["width"][i], data["height"][i]]}
             for i, (w, c) in enumerate(zip(data["text"], data["conf"])) if w.strip()]
    result.append({"page": page, "text": " ".join(x["word"] for x in words), "words": words})
json.dump(result, open(a.out, "w"))
