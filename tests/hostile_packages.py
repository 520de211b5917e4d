"""A generator of skill packages of every shape, good and hostile, for the fuzz test and its benchmark.

`write_fuzz_library(root, n, seed)` writes n packages and returns one `Case` per package saying what the
parser must do with it: a `good` package must be a node with its name and description and no error row;
a `node` package must be a node (report rows allowed); a `skipped` package must be absent from the nodes
and have a report row. `check(parsed, cases)` returns the violations (empty when the parser behaved).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from segos_pipeline.graph.parsing import ParsedLibrary
from segos_pipeline.graph.reads import shown_path


@dataclass(frozen=True)
class Case:
    kind: str  # the generator that made it
    rel: str  # package folder relative to the root, as os.walk returns it (may hold surrogates)
    expect: str  # good | node | skipped
    name: str = ""
    description: str = ""


WORDS = "parse convert image pdf table audio graph cluster fetch render index merge split train".split()


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _fm(body: str, fm: str) -> bytes:
    return f"---\n{fm}\n---\n{body}".encode()


# Each maker returns (SKILL.md bytes or None for a special file, expect, name, description, special).
Made = tuple[bytes | None, str, str, str, str]


def _good(rng: random.Random, i: int) -> Made:
    name, desc = f"good-{i}", f"Skill {i} can {_words(rng, 2, 8)}."
    extra = rng.choice(
        [
            "",
            f"tags: [{rng.choice(WORDS)}, {rng.choice(WORDS)}]",
            f"inputs:\n  - name: {rng.choice(WORDS)}\n    type: file\noutputs:\n  - table",
            "metadata:\n  author: someone\n  tags: [x]",
            "license: MIT\nallowed-tools: Read Bash",
            "# a comment line\nversion: 1.2",
            "notes: |\n  two\n  lines",
        ]
    )
    quote = rng.choice(["", "'", '"'])
    fm = f"name: {quote}{name}{quote}\ndescription: {quote}{desc}{quote}\n{extra}".strip()
    return _fm(f"# {name}\n\n{desc}\n", fm), "good", name, desc, ""


def _malformed_yaml(rng: random.Random, i: int) -> Made:
    fm = rng.choice(
        [
            'name: x\ndescription: "unclosed',
            "name: [unclosed",
            "name: x\n  bad: indent\n description: y",
            "name: x\ndescription: y\n\t- tab",
            "name: a: b",
            "{name: x, description",
            "- just\n- a list",
            "'a string'",
            "name: !!python/object/apply:os.system ['true']",
            "name: x\ndescription: y\n---\nsecond: doc",
            "? complex\n: key",
            "%YAML 9.9\n---\nname: x",
            "name: x\ncreated: 2024-13-45",
            "name: x\nn: !!int abc",
            "name: x\nflag: !!bool maybe",
            "name: x\nf: !!float abc",
        ]
    )
    return _fm("body text", fm), "node", "", "", ""


def _wrong_types(rng: random.Random, i: int) -> Made:
    bad = rng.choice(
        ["42", "yes", "null", "~", "[a, b]", "{x: 1}", "2024-01-02", "1.5", "0x1F", "!!binary aGk="]
    )
    field = rng.choice(["name", "description", "summary", "license", "compatibility", "tags", "tooling"])
    fm = f"name: typed-{i}\ndescription: fine\n{field}: {bad}"
    if field in ("tags", "tooling"):
        fm = f"name: typed-{i}\ndescription: fine\n{field}: [1, true, null, [a, b], {{k: v}}, 2.5, ok]"
    return _fm("Body paragraph.", fm), "node", "", "", ""


def _huge_or_deep(rng: random.Random, i: int) -> Made:
    pick = rng.randrange(8)
    if pick == 0:
        fm = "name: deep\ndescription: x\ntags: " + "[" * rng.randint(33, 3000) + "]" * 50
    elif pick == 1:
        fm = "name: deep\ndescription: x\n" + "\n".join(
            "  " * d + f"k{d}:" for d in range(rng.randint(33, 80))
        )
    elif pick == 2:
        fm = "name: r\ndescription: x\ntags: &t [*t]"
    elif pick == 3:  # billion laughs, a few levels
        lines = ["name: lol", "description: x", "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        lines += [
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ]
        fm = "\n".join(lines)
    elif pick == 4:
        fm = "name: big\ndescription: x\nnotes: " + "y" * rng.randint(100_001, 150_000)
    elif pick == 5:
        fm = "name: wide\ndescription: x\ntags: [" + ", ".join(["t"] * rng.randint(20_001, 30_000)) + "]"
    elif pick == 6:  # long blank runs in the places regexes look at
        fm = "name: blanks\ndescription: 'a" + " " * 20_000 + "b'\ntags: 'c" + " " * 20_000 + "d'"
        return _fm("# a" + " " * 30_000 + "x\n- " + " " * 30_000 + "\n", fm), "node", "", "", ""
    else:
        fm = "name: m\ndescription: x\nbase: &b {k: v}\nother:\n  <<: *b"
    return _fm("body", fm), "node", "", "", ""


def _binary(rng: random.Random, i: int) -> Made:
    pick = rng.randrange(6)
    if pick == 0:
        data = rng.randbytes(rng.randint(0, 600))
    elif pick == 1:
        data = b"---\nname: nul\x00\ndescription: x\n---\nbo\x00dy"
    elif pick == 2:
        data = "---\nname: utf16\ndescription: x\n---\nbody".encode("utf-16")
    elif pick == 3:
        data = "---\nname: café\ndescription: déjà\n---\nbody".encode("latin-1")
    elif pick == 4:
        data = b"---\nname: x\xff\xfe\ndescription: \xc3\x28\n---\n\xed\xa0\x80 surrogate"
    else:
        data = _fm("body", "name: ctl\x01\x7f\x85\ndescription: \u2028sep\ufeff")
    return data, "node", "", "", ""


def _encodings(rng: random.Random, i: int) -> Made:
    name, desc = f"enc-{i}", f"Encoded skill {i}."
    text = f"---\nname: {name}\ndescription: {desc}\n---\n# T\n\nbody\n"
    pick = rng.randrange(3)
    if pick == 0:
        return ("\ufeff" + text).encode(), "good", name, desc, ""
    if pick == 1:
        return text.replace("\n", "\r\n").encode(), "good", name, desc, ""
    return text.replace("\n", "\r").encode(), "node", "", "", ""


def _missing(rng: random.Random, i: int) -> Made:
    data = rng.choice(
        [
            b"",
            b"   \n\n",
            b"---\n---\n",
            b"---\n",
            b"---",
            b"---\nname: x\ndescription: never closed",
            b"# Only a body\n\nWith a paragraph.",
            b"---\ndescription: no name\n---\nb",
            b"---\nname: no-description\n---\n",
        ]
    )
    return data, "node", "", "", ""


def _odd_file(rng: random.Random, i: int) -> Made:
    special = rng.choice(["fifo", "symlink-outside", "broken-symlink", "symlink-loop", "socket"])
    return None, "skipped", "", "", special


def _odd_name(rng: random.Random, i: int) -> Made:
    name, desc = f"odd-name-{i}", f"Odd folder {i}."
    return _fm("body", f"name: {name}\ndescription: {desc}"), "good", name, desc, ""


_ODD_FOLDERS: list[Callable[[int], str | bytes]] = [
    lambda i: f"ünïcödé-{i}",
    lambda i: f"with space {i}",
    lambda i: f"-leading-dash-{i}",
    lambda i: f"emoji-\U0001f600-{i}",
    lambda i: f"{'l' * 200}-{i}",
    lambda i: f"new\nline-{i}",
    lambda i: f"SKILL.md-{i}",
]

MAKERS: dict[str, tuple[Callable[[random.Random, int], Made], int]] = {
    "good": (_good, 40),
    "malformed_yaml": (_malformed_yaml, 10),
    "wrong_types": (_wrong_types, 10),
    "huge_or_deep": (_huge_or_deep, 3),
    "binary": (_binary, 6),
    "encodings": (_encodings, 6),
    "missing": (_missing, 6),
    "odd_file": (_odd_file, 2),
    "odd_name": (_odd_name, 5),
    "undecodable_name": (_odd_name, 2),
    "undecodable_script": (_good, 2),
}


def _special(path: bytes, special: str, outside: bytes) -> None:
    if special == "fifo":
        os.mkfifo(path)
    elif special == "symlink-outside":
        os.symlink(outside, path)
    elif special == "broken-symlink":
        os.symlink(path + b".missing", path)
    elif special == "symlink-loop":
        os.symlink(path, path)
    elif special == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            try:
                sock.bind(path)
            except OSError:  # a socket path over the AF_UNIX length limit: a FIFO stands in
                os.mkfifo(path)


def write_fuzz_library(root: Path, n: int, seed: int = 0) -> list[Case]:
    """Write n packages of every shape under root (in shuffled domain folders) and return their cases."""
    rng = random.Random(seed)
    kinds = [k for k, (_f, w) in MAKERS.items() for _ in range(w)]
    broot = os.fsencode(root)
    outside = os.path.join(os.fsencode(root.parent), b"outside-" + os.fsencode(root.name) + b".md")
    with open(outside, "wb") as fh:
        fh.write(b"---\nname: secret\ndescription: outside the root\n---\n")
    cases = []
    for i in range(n):
        kind = rng.choice(kinds)
        data, expect, name, desc, special = MAKERS[kind][0](rng, i)
        folder: str | bytes = f"d{i % 37}/{kind}-{i}"
        if kind == "odd_name":
            folder = f"d{i % 37}/" + _ODD_FOLDERS[i % len(_ODD_FOLDERS)](i)
        elif kind == "undecodable_name":
            folder, expect = f"d{i % 37}/".encode() + b"bad\xff\xfe-" + str(i).encode(), "skipped"
        pkg = os.path.join(broot, os.fsencode(folder))
        os.makedirs(pkg, exist_ok=True)
        skill = os.path.join(pkg, b"SKILL.md")
        if data is None:
            _special(skill, special, outside)
        else:
            with open(skill, "wb") as fh:
                fh.write(data)
        if kind == "undecodable_script":
            os.makedirs(os.path.join(pkg, b"scripts"), exist_ok=True)
            for script in (b"ok.py", b"bad\xff.sh"):
                with open(os.path.join(pkg, b"scripts", script), "w") as fh:
                    fh.write("echo 1\n")
        cases.append(Case(kind, os.fsdecode(folder), expect, name, desc))
    return cases


def check(parsed: ParsedLibrary, cases: list[Case]) -> dict[str, list[str]]:
    """Violations by kind: silently dropped packages (neither node nor report row), good packages lost or
    altered, readable packages skipped, unreadable ones that became nodes. All empty when the parser
    behaved."""
    nodes = dict(zip(parsed.nodes["id"], parsed.nodes.select("name", "description").rows(), strict=True))
    report = parsed.report
    reported = set(report["file"])
    errors = set(report.filter(pl.col("severity") == "error")["file"])
    out: dict[str, list[str]] = {"dropped": [], "good_lost": [], "node_skipped": [], "skipped_as_node": []}
    for case in cases:
        file = shown_path(f"{case.rel}/SKILL.md")
        if case.rel not in nodes and file not in reported:
            out["dropped"].append(file)
        elif case.expect == "good" and (
            nodes.get(case.rel) != (case.name, case.description) or file in errors
        ):
            out["good_lost"].append(file)
        elif case.expect == "node" and case.rel not in nodes:
            out["node_skipped"].append(file)
        elif case.expect == "skipped" and case.rel in nodes:
            out["skipped_as_node"].append(file)
    return out
