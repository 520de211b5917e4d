#!/usr/bin/env python3
import glob
import json
import sys
from concurrent.futures import ProcessPoolExecutor

import fitz  # PyMuPDF


def one(path):
    try:
        with fitz.open(path) as doc:
            return path, [p.get_text("text", sort=True) for p in doc], None
    except Exception as exc:  # noqa: BLE001
        return path, [], str(exc)


if __name__ == "__main__":
    pattern, out = sys.argv[1], sys.argv[sys.argv.index("--out") + 1]
    files = sorted(glob.glob(pattern))
    failed = []
    with ProcessPoolExecutor() as pool, open(out, "w") as fh:
        for path, pages, err in pool.map(one, files, chunksize=8):
            if err:
                failed.append((path, err))
                continue
            fh.write(json.dumps({"file": path, "pages": pages}) + "\n")
    print(f"{len(files) - len(failed)} ok, {len(failed)} failed")
    for p, e in failed:
        print(" -", p, e)
