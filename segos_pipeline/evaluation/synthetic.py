"""Deterministic synthetic skill libraries (and task queries) for scale benchmarks.

The generator has to be realistic where the build and retrieval are sensitive, otherwise a benchmark on
it measures nothing:

* domains (≈ n/400, at least 4) each own a Zipf-distributed pseudo-word vocabulary of a few hundred to a
  few thousand words, and a shared general/technical English vocabulary is Zipf-distributed on top, so
  token document frequencies have the long tail of a real corpus: a handful of tokens are very common
  (they hit the join's df cap, as in a real library), most are rare, and the similarity join sees
  mostly within-domain candidates plus some cross-domain ones through shared and borrowed words;
* skills of one workflow chain share topic words and are linked by I/O fields (a producer's output is the
  next consumer's input), as the graph builder and the replay evaluation expect;
* the frontmatter uses the key variants real libraries use (`tags`/`domain`, `tooling`/`libraries`,
  `inputs` as strings or mappings, ...), so parsing cost and code paths resemble the real library.

Everything is driven by `numpy` generators seeded from (seed, stream, domain), so the same parameters
always give byte-identical files, and queries can be regenerated from the parameters alone without
reading the library back (`synthetic.json` at the library root records them).

    python -m segos_pipeline.evaluation.synthetic OUT_DIR --skills N [--seed S] [--queries Q]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np

from .synthetic_plan import Plan, Skill, plan_library
from .synthetic_render import Writer, render_package
from .synthetic_sampling import zipf_cdf
from .synthetic_vocabulary import (
    ADJECTIVES,
    GENERAL_ADJECTIVES,
    GENERAL_SYNONYMS,
    GENERAL_VERBS,
    GENERAL_ZIPF,
    TOOLING,
    VERBS,
)

# Bump when the output for given parameters changes, so cached libraries are regenerated.
GENERATOR_VERSION = 3
PARAMS_FILE = "synthetic.json"
SKILLS_PER_DOMAIN = 400

Progress = Callable[[str], None]


def _params(n_skills: int, seed: int, n_domains: int | None) -> dict[str, Any]:
    if n_skills < 1:
        raise ValueError("n_skills must be at least 1")
    n_dom = n_domains if n_domains is not None else max(4, round(n_skills / SKILLS_PER_DOMAIN))
    return {
        "generator_version": GENERATOR_VERSION,
        "n_skills": int(n_skills),
        "seed": int(seed),
        "n_domains": int(max(1, min(n_dom, n_skills))),
    }


# ------------------------------------------------------------------------------------------ public API


def generate_library(
    out_dir: Path,
    n_skills: int,
    seed: int = 0,
    n_domains: int | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Write `n_skills` packages as `out_dir/<domain>/<skill-name>/SKILL.md` (+ `scripts/`) and return a
    summary. Existing files of the same names are overwritten; other files are left alone.

    `workers` > 1 renders and writes domains in forked processes (default: 2 from 20k skills up, where
    the filesystem's per-file cost dominates). Every domain has its own random streams, so the output
    is byte-identical for any number of workers.
    """
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    params = _params(n_skills, seed, n_domains)
    plan = plan_library(params)
    say(f"planned {len(plan.skills)} skills in {len(plan.domains)} domains ({time.perf_counter() - t0:.1f}s)")
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if n_skills >= 20_000 else 1
    out_dir.mkdir(parents=True, exist_ok=True)
    # Round-robin over domains so both workers get a similar mix of big and small domains.
    shares = [list(range(k, len(plan.domains), workers)) for k in range(workers)]
    if workers > 1 and "fork" in mp.get_all_start_methods():
        global _FORK_PLAN
        _FORK_PLAN = (plan, out_dir)  # inherited by the forked workers; nothing large is pickled
        try:
            with mp.get_context("fork").Pool(workers) as pool:
                counts = pool.map(_write_share, shares)
        finally:
            _FORK_PLAN = None
    else:
        counts = [_write_domains(plan, out_dir, list(range(len(plan.domains))), say, t0)]
    n_scripts, chars = (sum(c[i] for c in counts) for i in (0, 1))
    summary = _summary(plan, out_dir)
    summary.update(n_script_files=n_scripts, skill_md_chars=chars, seconds=round(time.perf_counter() - t0, 2))
    (out_dir / PARAMS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    say(f"wrote {len(plan.skills)} skills to {out_dir} in {summary['seconds']}s")
    return summary


_FORK_PLAN: tuple[Plan, Path] | None = None


def _write_share(domains: list[int]) -> tuple[int, int]:
    assert _FORK_PLAN is not None
    plan, out_dir = _FORK_PLAN
    return _write_domains(plan, out_dir, domains)


def _write_domains(
    plan: Plan, out_dir: Path, domains: list[int], say: Progress | None = None, t0: float = 0.0
) -> tuple[int, int]:
    """Render and write the given domains; returns (script files, SKILL.md characters) written."""
    general_cdf = zipf_cdf(len(plan.general), *GENERAL_ZIPF)
    n_scripts = chars = 0
    for done, d in enumerate(domains, start=1):
        w = Writer(plan, d, general_cdf)
        dom_dir = os.path.join(out_dir, plan.domains[d].name)
        for i in plan.domains[d].skills:
            sk = plan.skills[i]
            text, scripts = render_package(plan, sk, w)
            pkg = os.path.join(dom_dir, sk.name)
            os.makedirs(os.path.join(pkg, "scripts") if scripts else pkg, exist_ok=True)
            with open(os.path.join(pkg, "SKILL.md"), "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            chars += len(text)
            for rel, content in scripts:
                with open(os.path.join(pkg, rel), "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(content)
            n_scripts += len(scripts)
        if say is not None and done % 25 == 0:
            say(f"wrote {done}/{len(domains)} domains ({time.perf_counter() - t0:.1f}s)")
    return n_scripts, chars


def _summary(plan: Plan, out_dir: Path) -> dict[str, Any]:
    sizes = [len(d.words) for d in plan.domains]
    per_domain = [len(d.skills) for d in plan.domains]
    return {
        "params": plan.params,
        "path": str(out_dir),
        "n_skills": len(plan.skills),
        "n_domains": len(plan.domains),
        "n_chains": len(plan.chains),
        "skills_per_domain": {"min": min(per_domain), "max": max(per_domain)},
        "vocabulary": {
            "general": len(plan.general) + len(VERBS) + len(ADJECTIVES),
            "domain_total": int(sum(sizes)),
            "domain_min": min(sizes),
            "domain_max": max(sizes),
            "tooling": len(TOOLING),
        },
    }


def load_params(library: dict[str, Any] | str | Path) -> dict[str, Any]:
    """Generator parameters from a summary dict or a generated library folder."""
    if isinstance(library, dict):
        return dict(library["params"])
    path = Path(library) / PARAMS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a library written by generate_library")
    return dict(json.loads(path.read_text())["params"])


def generate_queries(library: dict[str, Any] | str | Path, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` task queries `{"task", "query", "gold"}` whose gold skills are 1–3 consecutive skills of one
    chain. The text is built from those skills' vocabulary with noise (same-domain substitutes for some
    topic words, synonyms for general words, words from other domains, filler), never copied from the
    skill files, so retrieval has to rank rather than string-match."""
    params = load_params(library)
    if params.get("generator_version") != GENERATOR_VERSION:
        raise ValueError(
            f"library made by generator v{params.get('generator_version')}, not v{GENERATOR_VERSION}"
        )
    plan = plan_library(params)
    rng = np.random.default_rng([params["seed"], 3, seed])
    multi = [c for c in plan.chains if len(c) > 1]
    out: list[dict[str, Any]] = []
    for qi in range(n):
        pool = multi if multi and rng.random() < 0.75 else plan.chains
        chain = pool[int(rng.integers(0, len(pool)))]
        span = int(min(len(chain), rng.choice([1, 2, 2, 3])))
        start = int(rng.integers(0, len(chain) - span + 1))
        gold = [plan.skills[i] for i in chain[start : start + span]]
        out.append(
            {
                "task": f"synthetic-{qi:05d}",
                "query": _query_text(plan, gold, rng),
                "gold": [s.name for s in gold],
            }
        )
    return out


def _noisy(word: str, plan: Plan, d: int, rng: np.random.Generator, p: float) -> str:
    """`word`, or with probability p a substitute: a general synonym, or another word of its domain."""
    if rng.random() >= p:
        return word
    if word in GENERAL_SYNONYMS:
        options = GENERAL_SYNONYMS[word]
        return options[int(rng.integers(0, len(options)))]
    dom = plan.domains[d]
    try:
        rank = dom.words.index(word)
    except ValueError:
        return word
    return dom.words[int(dom.synonym[rank])]


def _query_text(plan: Plan, gold: list[Skill], rng: np.random.Generator) -> str:
    """A task description in the style of an agent benchmark instruction. Each gold skill contributes
    one or two of its topic words (40% replaced by another word of the domain), its role verb (50%
    replaced by a synonym) and sometimes a generic word of its domain; distractor words from another
    domain and generic filler compete with them."""

    def some(words: Sequence[str], k: int) -> list[str]:
        return [words[int(j)] for j in rng.choice(len(words), size=min(k, len(words)), replace=False)]

    parts: list[str] = []
    first = gold[0]
    if rng.random() < 0.6:
        src = " ".join(_noisy(x, plan, first.domain, rng, 0.4) for x in first.inputs[0][0].split("_"))
        parts.append(f"We have {src} {'records' if rng.random() < 0.5 else 'files'} under /root/data.")
    for i, sk in enumerate(gold):
        words = some(sk.topic, 1 + int(rng.random() < 0.4))
        if rng.random() < 0.4:
            words.append(sk.chain_topic[int(rng.integers(0, len(sk.chain_topic)))])
        words = [_noisy(x, plan, sk.domain, rng, 0.4) for x in words]
        if rng.random() < 0.5:  # a generic word of the domain: related, not specific to this skill
            dom_words = plan.domains[sk.domain].words
            words.insert(
                int(rng.integers(0, len(words) + 1)),
                dom_words[int(rng.integers(0, min(300, len(dom_words))))],
            )
        verb = _noisy(sk.role[1], plan, sk.domain, rng, 0.5)
        lead = "First" if i == 0 else ("Then" if i < len(gold) - 1 else "Finally")
        if len(gold) == 1:
            lead = "Please"
        noun = plan.general[int(rng.integers(0, 120))]
        parts.append(f"{lead} {verb} the {' '.join(words)} {noun}.")
    if rng.random() < 0.7:  # distractor words from an unrelated domain
        other = plan.domains[int(rng.integers(0, len(plan.domains)))]
        picks = some(other.words[:300], int(rng.integers(1, 4)))
        frame = ("The {} notes from last week are unrelated.", "Do not touch the {} folder.", "Context: {}.")
        parts.append(frame[int(rng.integers(0, len(frame)))].format(" ".join(picks)))
    if rng.random() < 0.5:  # generic filler that every skill of every domain could match
        adj, verb = some(GENERAL_ADJECTIVES, 1)[0], some(GENERAL_VERBS[:40], 1)[0]
        parts.append(f"Do not {verb} any {adj} {' '.join(some(plan.general[:80], 2))} along the way.")
    last = gold[-1].outputs[0]
    parts.append(
        f"Save the {_noisy(last[0].split('_')[-1], plan, gold[-1].domain, rng, 0.5)} as "
        f"{last[1]} to /root/output and make sure the {plan.general[int(rng.integers(0, 60))]} is correct."
    )
    return " ".join(parts)


def write_queries(queries: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for q in queries:
            fh.write(json.dumps(q) + "\n")


PROG = "python -m segos_pipeline.evaluation.synthetic"


@click.command(name="synthetic", help=__doc__.splitlines()[0])
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--skills", type=click.IntRange(min=1), required=True, help="number of skill packages to write")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--domains", type=click.IntRange(min=1), default=None, help=f"default: n/{SKILLS_PER_DOMAIN}, at least 4"
)
@click.option(
    "--queries",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="also write OUT_DIR/queries.jsonl with Q queries",
)
def synthetic_command(out_dir: Path, skills: int, seed: int, domains: int | None, queries: int) -> None:
    """Write a generated library (and queries); the summary goes to stdout as JSON, progress to stderr."""
    say = lambda msg: click.echo(msg, err=True)  # noqa: E731 - a one-line progress sink
    summary = generate_library(out_dir, skills, seed, domains, progress=say)
    if queries:
        write_queries(generate_queries(summary, queries, seed), out_dir / "queries.jsonl")
        say(f"wrote {queries} queries to {out_dir / 'queries.jsonl'}")
    click.echo(json.dumps(summary, indent=2))


def main(argv: list[str] | None = None) -> int:
    """The command line (`argv`: the arguments, default sys.argv[1:]); the exit status (2: bad usage)."""
    try:
        synthetic_command.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:  # --help
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
