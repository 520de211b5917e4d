#!/usr/bin/env python3
import argparse
import json
import unicodedata

import pdfplumber


def page_range(spec, n):
    if not spec:
        return range(n)
    a, _, b = spec.partition("-")
    return range(int(a) - 1, int(b or a))


ap = argparse.ArgumentParser()
ap.add_argument("pdf_path")
ap.add_argument("--pages")
ap.add_argument("--out", default="page_texts.json")
args = ap.parse_args()

texts = []
with pdfplumber.open(args.pdf_path) as pdf:
    for i in page_range(args.pages, len(pdf.pages)):
        raw = pdf.pages[i].extract_text(layout=True, x_tolerance=1.5) or ""
        txt = unicodedata.normalize("NFKC", raw).replace("-\n", "")
        if len(txt.strip()) < 50:
            print(f"page {i + 1}: little or no text, probably scanned")
        texts.append(txt)

json.dump(texts, open(args.out, "w"), ensure_ascii=False)
print(f"wrote {len(texts)} pages to {args.out}")
