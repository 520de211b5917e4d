#!/usr/bin/env python3
import argparse
import glob
import pathlib

from PIL import Image, ImageOps

try:
    import pillow_heif
    pillow_heif.register_heif_opener()
except ImportError:
    pass

ap = argparse.ArgumentParser()
ap.add_argument("pattern")
ap.add_argument("--max-width", type=int, default=1600)
ap.add_argument("--out", default="resized")
a = ap.parse_args()
out = pathlib.Path(a.out)
out.mkdir(parents=True, exist_ok=True)
for path in sorted(glob.glob(a.pattern)):
    im = ImageOps.exif_transpose(Image.open(path))
    if im.width > a.max_width:
        im = im.resize((a.max_width, round(im.height * a.max_width / im.width)), Image.LANCZOS)
    target = out / pathlib.Path(path).name
    im.save(target, quality=92) if target.suffix.lower() in {".jpg", ".jpeg"} else im.save(target)
    print(target, im.size)
