#!/usr/bin/env python3
import argparse
import csv
import json

import fitz

ap = argparse.ArgumentParser()
ap.add_argument("pdf_path")
ap.add_argument("pii_spans")
ap.add_argument("--out", required=True)
a = ap.parse_args()

spans = json.load(open(a.pii_spans))
doc = fitz.open(a.pdf_path)
log = []
for s in spans:
    page = doc[s["page"] - 1]
    for rect in page.search_for(s["text"]):
        page.add_redact_annot(rect, fill=(0, 0, 0))
        log.append({"page": s["page"], "entity_type": s["entity_type"]})
for page in doc:
    page.apply_redactions(images=fitz.PDF_REDACT_IMAGE_PIXELS)
doc.set_metadata({})
doc.save(a.out, garbage=4, deflate=True)

check = fitz.open(a.out)
leaks = [s["text"] for s in spans if s["text"] in check[s["page"] - 1].get_text()]
assert not leaks, f"redaction failed for {len(leaks)} spans"
with open(a.out + ".log.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=["page", "entity_type"])
    w.writeheader()
    w.writerows(log)
print(f"{len(log)} regions redacted -> {a.out}")
