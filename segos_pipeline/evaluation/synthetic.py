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
import math
import multiprocessing as mp
import os
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..text.tokens import keep_word, stem

# Bump when the output for given parameters changes, so cached libraries are regenerated.
GENERATOR_VERSION = 3
PARAMS_FILE = "synthetic.json"
SKILLS_PER_DOMAIN = 400
GENERAL_TAIL_WORDS = 5000  # pseudo-words ranked after the real general nouns (see _plan)
GENERAL_ZIPF = (1.0, 2.7)  # exponent s and Mandelbrot offset q of the general-vocabulary ranks

Progress = Callable[[str], None]

# ------------------------------------------------------------------------------------ fixed vocabularies

# General/technical English, roughly most common first (Zipf rank follows this order). The first words
# end up in a large share of all skills, as "data" or "file" do in a real library.
GENERAL_NOUNS = """
data file output input result table report value format text list record field column row set
structure process step default error type model source target name path config option update summary
image chart graph plot page document code script function query request response message user task
workflow pipeline batch stream event log metric score label feature sample test case version schema
index key map string number date time range limit size count total average rate quality status state
object parameter argument variable template rule filter group order directory folder archive bundle
dataset database warehouse bucket endpoint service server client browser terminal notebook spreadsheet
slide dashboard widget layout style theme color font icon header footer section paragraph sentence word
token character unit currency price cost budget invoice customer product account transaction payment
vendor supplier inventory shipment region store matrix vector tensor array frame series signal spectrum
frequency sequence protein gene molecule cell coordinate location address boundary polygon grid mesh
surface volume density mass force energy sensor device network protocol packet port certificate
credential permission role policy secret
""".split()
GENERAL_VERBS = """
load parse convert validate export import read write clean transform compute check extract generate
build run merge split join filter sort group analyze summarize visualize render publish upload download
fetch sync cache store archive compress encrypt decode encode resolve schedule notify track trace
inspect review audit debug profile optimize tune train evaluate predict classify cluster rank segment
annotate resize crop translate transcribe lint test package release migrate backup restore deploy
monitor detect measure estimate compare match align normalize aggregate
""".split()
GENERAL_ADJECTIVES = """
large small nested missing duplicate invalid raw final partial incremental daily weekly remote local
external internal public private structured numeric categorical spatial temporal statistical visual
interactive automatic manual secure fast robust consistent accurate reproducible
""".split()

_VERBS = list(dict.fromkeys(GENERAL_VERBS))
_ADJECTIVES = list(dict.fromkeys(GENERAL_ADJECTIVES))

# A few real synonyms of general words, used to perturb queries (vocabulary mismatch with the library).
GENERAL_SYNONYMS: dict[str, list[str]] = {
    "load": ["read", "import", "ingest"],
    "read": ["load", "open"],
    "save": ["write", "store", "persist"],
    "write": ["save", "emit"],
    "convert": ["transform", "translate", "turn"],
    "transform": ["convert", "reshape"],
    "validate": ["check", "verify"],
    "check": ["verify", "validate"],
    "extract": ["pull", "parse", "harvest"],
    "parse": ["read", "decode", "extract"],
    "merge": ["combine", "join", "union"],
    "join": ["merge", "combine"],
    "clean": ["tidy", "sanitize", "fix"],
    "plot": ["chart", "draw", "visualize"],
    "chart": ["plot", "graph", "figure"],
    "visualize": ["plot", "chart", "draw"],
    "summarize": ["condense", "digest", "recap"],
    "report": ["summary", "writeup"],
    "table": ["sheet", "frame", "grid"],
    "file": ["document", "artifact"],
    "image": ["picture", "photo", "figure"],
    "compute": ["calculate", "derive", "work"],
    "analyze": ["examine", "study", "inspect"],
    "generate": ["create", "produce", "make"],
    "build": ["create", "assemble", "construct"],
    "detect": ["find", "spot", "identify"],
    "estimate": ["approximate", "infer", "gauge"],
    "compare": ["contrast", "diff", "match"],
    "export": ["output", "dump", "save"],
    "fetch": ["download", "retrieve", "get"],
    "download": ["fetch", "retrieve"],
    "upload": ["push", "send", "publish"],
    "train": ["fit", "learn"],
    "predict": ["forecast", "infer"],
    "classify": ["categorize", "label"],
    "aggregate": ["roll", "summarize", "group"],
    "normalize": ["standardize", "rescale"],
    "render": ["draw", "produce", "display"],
    "error": ["failure", "problem", "issue"],
    "result": ["outcome", "answer", "output"],
    "record": ["entry", "row", "item"],
    "dataset": ["data", "corpus", "collection"],
    "document": ["file", "paper", "doc"],
    "large": ["big", "huge"],
    "missing": ["absent", "empty", "null"],
    "duplicate": ["repeated", "redundant"],
}

# Determiners and prepositions are all tokeniser stopwords, like most of their real-text counterparts.
FUNCTION_WORDS = ("the", "a", "each", "all", "any", "its", "this", "some", "the", "the")
PREPOSITIONS = ("from", "into", "for", "with", "by", "per", "against", "over", "under", "to", "in", "on")
ADVERBS = ("carefully", "quickly", "first", "then", "always", "only", "safely", "incrementally")

# (role noun for names, verb for descriptions/queries). Names end with the role: "tarvin-kelo-loader".
ROLES: tuple[tuple[str, str], ...] = (
    ("loader", "load"),
    ("parser", "parse"),
    ("validator", "validate"),
    ("converter", "convert"),
    ("exporter", "export"),
    ("plotter", "plot"),
    ("merger", "merge"),
    ("cleaner", "clean"),
    ("extractor", "extract"),
    ("analyzer", "analyze"),
    ("summarizer", "summarize"),
    ("builder", "build"),
    ("checker", "check"),
    ("generator", "generate"),
    ("transformer", "transform"),
    ("calculator", "compute"),
    ("detector", "detect"),
    ("estimator", "estimate"),
    ("comparer", "compare"),
    ("fetcher", "fetch"),
    ("uploader", "upload"),
    ("scheduler", "schedule"),
    ("monitor", "monitor"),
    ("tracker", "track"),
    ("renderer", "render"),
    ("aggregator", "aggregate"),
    ("normalizer", "normalize"),
    ("classifier", "classify"),
    ("trainer", "train"),
    ("predictor", "predict"),
    ("annotator", "annotate"),
    ("indexer", "index"),
    ("profiler", "profile"),
    ("auditor", "audit"),
    ("optimizer", "optimize"),
    ("segmenter", "segment"),
    ("resolver", "resolve"),
    ("formatter", "format"),
    ("linter", "lint"),
    ("packager", "package"),
    ("migrator", "migrate"),
    ("archiver", "archive"),
    ("toolkit", "handle"),
    ("helper", "assist"),
    ("workflow", "run"),
    ("pipeline", "process"),
    ("guide", "explain"),
    ("inspector", "inspect"),
)

TOOLING = """
pandas numpy scipy polars pyarrow duckdb sqlalchemy psycopg sqlite jq yq requests httpx beautifulsoup
lxml playwright selenium scrapy matplotlib seaborn plotly bokeh altair pillow opencv scikit-image
imageio ffmpeg sox librosa pydub whisper openai anthropic transformers torch tensorflow jax keras
scikit-learn xgboost lightgbm catboost statsmodels prophet networkx igraph shapely geopandas rasterio
gdal pyproj folium osmnx biopython pysam rdkit openmm ase pymatgen astropy sympy numba cython
pdfplumber pypdf reportlab python-docx openpyxl xlsxwriter python-pptx markdown pandoc latex
docker kubectl helm terraform ansible git gh make cmake gcc clang rustc cargo node npm typescript
eslint prettier black ruff mypy pytest hypothesis tox nox poetry uv pip conda boto3 gcloud az
redis kafka rabbitmq celery airflow dagster prefect dbt spark dask ray mlflow wandb optuna
fastapi flask django starlette uvicorn gunicorn nginx grpc protobuf graphql openapi jsonschema
pydantic marshmallow cerberus great-expectations pandera tqdm rich click typer loguru structlog
""".split()

IO_TYPES = (
    "DataFrame",
    "Path",
    "JSON",
    "dict",
    "list[str]",
    "ndarray",
    "str",
    "Image",
    "Parquet file",
    "CSV file",
    "Markdown",
    "PDF",
    "GeoDataFrame",
    "Tensor",
    "HTML",
    "bytes",
    "float",
    "SQL table",
)
EXTRA_INPUTS = (
    ("threshold", "float"),
    ("config", "dict"),
    ("output_dir", "Path"),
    ("limit", "int"),
    ("columns", "list[str]"),
    ("date_range", "tuple[date, date]"),
    ("api_key", "str"),
    ("locale", "str"),
)
HEADINGS_WHEN = ("When to use", "Use when", "Overview", "Purpose")
HEADINGS_STEPS = ("Steps", "Procedure", "How it works", "Workflow", "Instructions")
HEADINGS_NOTES = ("Pitfalls", "Notes", "Gotchas", "Tips", "Limitations")
DOMAIN_SUFFIXES = (
    "analytics",
    "ops",
    "media",
    "docs",
    "science",
    "engineering",
    "finance",
    "bio",
    "geo",
    "ml",
    "security",
    "web",
    "data",
    "design",
    "research",
    "devtools",
)
LICENSES = ("MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary", "CC-BY-4.0")
ALLOWED_TOOLS = ("Read", "Write", "Bash", "Edit", "Grep", "Glob", "WebFetch")
SCRIPT_EXT = (".py", ".py", ".py", ".sh", ".js", ".ts")

_ONSETS = tuple("b c d f g h j k l m n p r s t v w z b d k l m n p r t br dr gr kl pl st tr sh ch th".split())
_VOWELS = ("a", "e", "i", "o", "u", "a", "o", "i", "e", "ai", "ou", "y")
_CODAS = ("", "", "", "", "", "", "n", "r", "l", "x", "m", "t", "nd", "rk", "v", "z")


# ------------------------------------------------------------------------------------------ sampling
#
# A numpy call per draw costs ~1 µs, which dominates a 100k-skill run; every stream below therefore draws
# thousands of values per numpy call and hands them out through a generator's __next__ (~50 ns).

_BLOCK = 4096


def _zipf_cdf(n: int, s: float, q: float = 2.7) -> np.ndarray:
    """Zipf–Mandelbrot cdf over ranks 0..n-1 (q flattens the head as real corpora do)."""
    weights = 1.0 / (np.arange(n, dtype=np.float64) + q) ** s
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _uniform_cdf(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float64) / n


class _Stream:
    """Uniform floats in [0, 1) from one numpy generator, buffered."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.u: Callable[[], float] = self._floats().__next__

    def _floats(self) -> Iterator[float]:
        while True:
            yield from self.rng.random(_BLOCK).tolist()

    def below(self, n: int) -> int:
        return int(self.u() * n)

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self.u() * len(seq))]


class _Sampler:
    """Words drawn i.i.d. by a fixed cdf (Zipf or uniform), buffered."""

    def __init__(self, words: Sequence[str], cdf: np.ndarray, rng: np.random.Generator):
        self._gen = self._draws(np.asarray(words, dtype=object), cdf, rng)
        self.one: Callable[[], str] = self._gen.__next__

    @staticmethod
    def _draws(words: np.ndarray, cdf: np.ndarray, rng: np.random.Generator) -> Iterator[str]:
        top = len(words) - 1
        while True:
            idx = np.searchsorted(cdf, rng.random(_BLOCK), side="right")
            yield from words[np.minimum(idx, top)].tolist()

    def take(self, k: int) -> list[str]:
        return list(islice(self._gen, k))


# ---------------------------------------------------------------------------------------------- plan


@dataclass
class _Domain:
    name: str
    words: list[str]  # by Zipf rank, most frequent first
    s: float  # Zipf exponent of this domain's vocabulary
    tools: list[str]  # preferred tooling, most used first
    synonym: np.ndarray  # rank → rank of a same-domain word used as a query-time substitute
    skills: list[int] = field(default_factory=list)

    def cdf(self) -> np.ndarray:
        return _zipf_cdf(len(self.words), self.s)


@dataclass
class _Skill:
    idx: int
    domain: int
    name: str
    role: tuple[str, str]
    topic: list[str]  # this skill's own domain words (the first one is in its name)
    chain_topic: list[str]  # words shared by its chain
    chain: int
    pos: int
    inputs: list[tuple[str, str]]
    outputs: list[tuple[str, str]]
    tools: list[str]
    tags: list[str]


@dataclass
class _Plan:
    params: dict[str, Any]
    general: list[str]
    domains: list[_Domain]
    skills: list[_Skill]
    chains: list[list[int]]


_SYLLABLES = np.array([o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS], dtype=object)
_stem = getattr(stem, "__wrapped__", stem)  # uncached: 500k one-off words would only churn its LRU cache


def _pseudo_words(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    """`n` new pronounceable words that survive tokenisation unchanged (no stemmer folding, no
    stopwords), so a generated word is exactly one token and vocabulary sizes are what they say."""
    out: list[str] = []
    while len(out) < n:
        m = 2 * (n - len(out)) + 64
        idx = rng.integers(0, len(_SYLLABLES), size=(3, m))
        words = _SYLLABLES[idx[0]] + _SYLLABLES[idx[1]]
        three = rng.random(m) < 0.3
        words[three] = words[three] + _SYLLABLES[idx[2][three]]
        for w in words.tolist():
            if 4 <= len(w) <= 11 and w not in taken and keep_word(w) and _stem(w) == w:
                taken.add(w)
                out.append(w)
                if len(out) == n:
                    break
    return out


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


_CHAIN_LENGTHS = (1, 2, 2, 3, 3, 3, 4, 4, 5, 6)


def _plan(params: dict[str, Any]) -> _Plan:
    """Domains, vocabularies, chains and per-skill structured fields (everything but the prose)."""
    seed, n, n_dom = params["seed"], params["n_skills"], params["n_domains"]
    rng = np.random.default_rng([seed, 0])
    general = list(dict.fromkeys(GENERAL_NOUNS))  # keep rank order, drop repeats in the list above
    # Pseudo-words must never coincide with a real word the generator also uses.
    taken: set[str] = (
        set(general)
        | set(GENERAL_VERBS)
        | set(GENERAL_ADJECTIVES)
        | {w for syns in GENERAL_SYNONYMS.values() for w in syns}
        | {t for tool in TOOLING for t in tool.split("-")}
        | {r for role in ROLES for r in role}
    )

    # Domain sizes vary (lognormal weights) like real collections; every domain gets at least one skill.
    weights = rng.lognormal(0.0, 0.5, size=n_dom)
    sizes = np.maximum(1, np.floor(weights / weights.sum() * n)).astype(np.int64)
    while sizes.sum() > n:
        sizes[int(np.argmax(sizes))] -= 1
    for i in rng.integers(0, n_dom, size=int(n - sizes.sum())):
        sizes[i] += 1

    # The long tail of general/technical English: a real library's descriptions use thousands of
    # ordinary words, most of them rare. Without this tail every general word would be common, the
    # vocabulary too concentrated, and the join's df band just under the cap unrealistically empty.
    general += _pseudo_words(rng, GENERAL_TAIL_WORDS, taken)

    domains: list[_Domain] = []
    tool_cdf = _zipf_cdf(len(TOOLING), 0.8)
    for d in range(n_dom):
        # A few hundred to a few thousand words (log-uniform), a little more for bigger domains.
        n_words = int(np.clip(np.exp(rng.uniform(np.log(300), np.log(3000))) + sizes[d], 300, 4000))
        words = _pseudo_words(rng, n_words, taken)
        suffix = DOMAIN_SUFFIXES[int(rng.integers(0, len(DOMAIN_SUFFIXES)))]
        tools = list(dict.fromkeys(TOOLING[i] for i in np.searchsorted(tool_cdf, rng.random(12))))
        domains.append(
            _Domain(
                name=f"{words[0]}-{suffix}",  # words[0] is globally unique, so is the domain name
                words=words,
                s=float(rng.uniform(0.95, 1.15)),
                tools=tools,
                synonym=rng.permutation(n_words),
            )
        )

    skills: list[_Skill] = []
    chains: list[list[int]] = []
    names: set[str] = set()
    role_cdf = _zipf_cdf(len(ROLES), 0.7).tolist()
    for d, dom in enumerate(domains):
        drng = np.random.default_rng([seed, 1, d])
        s = _Stream(drng)
        vocab = _Sampler(dom.words, dom.cdf(), drng)
        n_d = int(sizes[d])
        made = 0
        while made < n_d:
            length = min(n_d - made, s.pick(_CHAIN_LENGTHS))
            chain_topic = list(dict.fromkeys(vocab.take(2)))
            # Artifacts a_0..a_L: skill k consumes a_k and produces a_{k+1}, so outputs feed inputs.
            artifacts = [
                (f"{vocab.one()}_{GENERAL_NOUNS[s.below(120)]}", s.pick(IO_TYPES)) for _ in range(length + 1)
            ]
            members = []
            for k in range(length):
                role = ROLES[min(bisect_right(role_cdf, s.u()), len(ROLES) - 1)]
                topic = list(dict.fromkeys(vocab.take(2 + s.below(3))))
                name = _unique_name(s, topic, chain_topic, role, vocab, names)
                inputs = [artifacts[k]]
                if s.u() < 0.25:
                    inputs.append(s.pick(EXTRA_INPUTS))
                tools = [s.pick(dom.tools) if s.u() < 0.8 else s.pick(TOOLING) for _ in range(1 + s.below(3))]
                skills.append(
                    _Skill(
                        idx=len(skills),
                        domain=d,
                        name=name,
                        role=role,
                        topic=topic,
                        chain_topic=chain_topic,
                        chain=len(chains),
                        pos=k,
                        inputs=inputs,
                        outputs=[artifacts[k + 1]],
                        tools=list(dict.fromkeys(tools)),
                        tags=list(dict.fromkeys([dom.name, *chain_topic[: 1 + s.below(2)]])),
                    )
                )
                members.append(len(skills) - 1)
                dom.skills.append(len(skills) - 1)
            chains.append(members)
            made += length
    return _Plan(params=params, general=general, domains=domains, skills=skills, chains=chains)


def _unique_name(
    s: _Stream,
    topic: list[str],
    chain_topic: list[str],
    role: tuple[str, str],
    vocab: _Sampler,
    names: set[str],
) -> str:
    """2–3 words ending in the role noun, unique under the shared matching rule (normalised), so the
    parser never reports a duplicate name. All parts are [a-z]+, so dropping "-" is that rule."""
    first = topic[0]
    for attempt in range(50):
        if attempt == 0 and s.u() < 0.45:
            words = [first, role[0]]
        elif attempt < 3:
            middle = chain_topic[0] if s.u() < 0.5 else (topic[1] if len(topic) > 1 else vocab.one())
            words = [first, middle, role[0]]
        else:
            words = [first, vocab.one(), role[0]]
        if words[0] == words[1]:
            continue
        key = "".join(words)
        if key not in names:
            names.add(key)
            return "-".join(words)
    raise RuntimeError(f"no unique name for topic {topic}")  # needs ~50 collisions in a row


# --------------------------------------------------------------------------------------------- render


def _q(text: str) -> str:
    """A YAML double-quoted scalar: JSON string syntax is valid YAML, and json.dumps escapes for us."""
    return json.dumps(text)


def _flow(items: Sequence[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


class _Writer:
    """Prose for one domain: Zipf draws from the domain vocabulary, the general vocabulary and a little
    from a neighbouring domain (real domains overlap, which gives the join cross-domain candidates)."""

    def __init__(self, plan: _Plan, d: int, general_cdf: np.ndarray):
        rng = np.random.default_rng([plan.params["seed"], 2, d])
        self.s = _Stream(rng)
        dom = plan.domains[d]
        near = plan.domains[(d + 1) % len(plan.domains)]
        self.dom = _Sampler(dom.words, dom.cdf(), rng)
        self.near = _Sampler(near.words, near.cdf(), rng)
        self.gen = _Sampler(plan.general, general_cdf, rng)
        self.verb = _Sampler(_VERBS, _zipf_cdf(len(_VERBS), 1.0), rng)
        self.adj = _Sampler(_ADJECTIVES, _zipf_cdf(len(_ADJECTIVES), 1.0), rng)
        self.det = _Sampler(FUNCTION_WORDS, _uniform_cdf(len(FUNCTION_WORDS)), rng)
        self.prep = _Sampler(PREPOSITIONS, _uniform_cdf(len(PREPOSITIONS)), rng)

    def noun_phrase(self, topic: list[str]) -> str:
        u = self.s.u
        r = u()
        det = self.det.one()
        if u() < 0.2:
            det = f"{det} {self.adj.one()}"
        if r < 0.35:
            return f"{det} {topic[int(u() * len(topic))]} {self.gen.one()}"
        if r < 0.7:
            return f"{det} {self.dom.one()} {self.gen.one()}"
        if r < 0.8:
            return f"{det} {self.near.one()} {self.dom.one()}"
        return f"{det} {self.gen.one()} {self.gen.one()}"

    def sentence(self, topic: list[str], verb: str | None = None) -> str:
        parts = [(verb or self.verb.one()).capitalize(), self.noun_phrase(topic)]
        for _ in range(self.s.below(3)):
            parts.append(self.prep.one())
            parts.append(self.noun_phrase(topic))
        if self.s.u() < 0.25:
            parts.append(self.s.pick(ADVERBS))
        return " ".join(parts) + "."


MAX_BODY_CHARS = 1500
_LOG_400, _LOG_1400 = math.log(400), math.log(1400)


def _render(plan: _Plan, sk: _Skill, w: _Writer) -> tuple[str, list[tuple[str, str]]]:
    """SKILL.md text and the scripts (relative path, content) of one skill."""
    u, pick = w.s.u, w.s.pick
    dom = plan.domains[sk.domain]
    verb = sk.role[1]
    topic = sk.topic + sk.chain_topic
    out_name = sk.outputs[0][0].replace("_", " ")
    in_name = sk.inputs[0][0].replace("_", " ")

    desc = [f"{verb.capitalize()}s {' '.join(sk.topic)} {w.gen.one()} from {in_name} into {out_name}."]
    for _ in range(w.s.pick((0, 1, 1, 2, 2))):  # 1–3 sentences, mostly 2–3 (real median ≈ 240 chars)
        desc.append(w.sentence(topic))
    description = " ".join(desc)

    fm = ["---", f"name: {_q(sk.name)}", f"description: {_q(description)}"]
    r = u()
    if r < 0.2:
        fm.append(f"summary: {_q(f'{in_name} in, {out_name} out.')}")
    elif r < 0.35:
        fm.append(f"one_line_capability: {_q(f'{verb.capitalize()} {sk.topic[0]} {out_name}')}")
    # Domain/category on about half of the skills; others carry topical tags only, or none.
    r = u()
    if r < 0.25:
        fm.append(f"tags: {_flow([*sk.tags[1:], w.dom.one()])}")
        fm.append(f"domain: {_q(dom.name)}")
    elif r < 0.45:
        fm.append(f"tags: {_flow([*sk.tags, w.gen.one()])}")
    elif r < 0.55:
        fm.append(f"category: {_q(dom.name)}")
    elif r < 0.8:
        fm.append(f"tags: {_flow(sk.tags[1:])}")
    r = u()
    if r < 0.65:  # real libraries declare tooling far from always (the body often names it instead)
        tool_key = "tooling" if r < 0.4 else ("libraries" if r < 0.55 else "dependencies")
        fm.append(f"{tool_key}: {_flow(sk.tools)}")
    _io(fm, "inputs", "input", sk.inputs, u())
    _io(fm, "outputs", "output", sk.outputs, u())
    examples = []
    if u() < 0.35:
        examples = [w.sentence(topic, verb).rstrip(".") for _ in range(1 + w.s.below(2))]
        fm.append(f"{'examples' if u() < 0.7 else 'example_tasks'}:")
        fm.extend(f"  - {_q(e)}" for e in examples)
    if u() < 0.2:
        fm.append(f"compatibility: {_q(f'Requires {sk.tools[0]} and network access.')}")
    if u() < 0.4:
        tools = sorted({pick(ALLOWED_TOOLS) for _ in range(1 + w.s.below(3))})
        fm.append(f"allowed-tools: {_q(' '.join(tools))}")
    if u() < 0.7:
        fm.append(f"license: {_q(pick(LICENSES))}")
    fm.append("---")

    scripts: dict[str, str] = {}
    if u() < 0.35:
        for _ in range(1 + w.s.below(2)):
            ext = pick(SCRIPT_EXT)
            base = f"{pick(sk.topic)}_{verb}" if u() < 0.7 else f"{w.gen.one()}_{w.dom.one()}"
            scripts[f"scripts/{base}{ext}"] = _script(ext, sk, verb)

    # Body: 400–1500 characters (log-uniform target), a title and two to four `##` sections.
    target = math.exp(_LOG_400 + u() * (_LOG_1400 - _LOG_400))
    title = " ".join(p.capitalize() for p in sk.name.split("-"))
    body = [f"# {title}", "", f"## {pick(HEADINGS_WHEN)}"]
    body.append(" ".join(w.sentence(topic) for _ in range(1 + w.s.below(2))))
    body += ["", f"## {pick(HEADINGS_STEPS)}"]
    size = sum(len(x) + 1 for x in body)  # characters of "\n".join(body) plus one

    def add(*lines: str) -> bool:
        nonlocal size
        extra = sum(len(x) + 1 for x in lines)
        if size + extra - 1 > MAX_BODY_CHARS:
            return False
        body.extend(lines)
        size += extra
        return True

    step = 1
    while size < target * 0.75 and step <= 8 and add(f"{step}. {w.sentence(topic)}"):
        step += 1
    if scripts and size < target:
        first = next(iter(scripts))
        runner = {".py": "python", ".sh": "bash"}.get(first[first.rfind(".") :], "node")
        add("", f"```bash\n{runner} {first} --in {sk.inputs[0][0]}\n```")
    if size < target and add("", f"## {pick(HEADINGS_NOTES)}", f"- {w.sentence(topic)}"):
        while size < target and add(f"- {w.sentence(topic)}"):
            pass
    if not examples and u() < 0.3:
        add("", "## Examples", f"- {w.sentence(topic, verb).rstrip('.')}")
    return "\n".join(fm) + "\n\n" + "\n".join(body) + "\n", list(scripts.items())


def _io(fm: list[str], plural: str, singular: str, items: list[tuple[str, str]], r: float) -> None:
    """I/O in the three shapes real libraries use: strings, mappings, one inline string."""
    if r < 0.5:
        fm.append(f"{plural}:")
        fm.extend(f"  - {_q(f'{n}: {t}')}" for n, t in items)
    elif r < 0.8:
        fm.append(f"{plural}:")
        for n, t in items:
            fm.append(f"  - name: {_q(n)}")
            fm.append(f"    type: {_q(t)}")
    else:
        fm.append(f"{singular}: {_q(', '.join(f'{n}: {t}' for n, t in items))}")


def _script(ext: str, sk: _Skill, verb: str) -> str:
    if ext == ".py":
        return (
            f'"""{verb.capitalize()} {" ".join(sk.topic)}."""\nimport sys\n\n\n'
            f"def main() -> None:\n    print(sys.argv[1:])\n\n\nif __name__ == '__main__':\n    main()\n"
        )
    if ext == ".sh":
        return f'#!/usr/bin/env bash\n# {verb} {" ".join(sk.topic)}\nset -euo pipefail\necho "$@"\n'
    return f"// {verb} {' '.join(sk.topic)}\nconsole.log(process.argv.slice(2));\n"


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
    plan = _plan(params)
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


_FORK_PLAN: tuple[_Plan, Path] | None = None


def _write_share(domains: list[int]) -> tuple[int, int]:
    assert _FORK_PLAN is not None
    plan, out_dir = _FORK_PLAN
    return _write_domains(plan, out_dir, domains)


def _write_domains(
    plan: _Plan, out_dir: Path, domains: list[int], say: Progress | None = None, t0: float = 0.0
) -> tuple[int, int]:
    """Render and write the given domains; returns (script files, SKILL.md characters) written."""
    general_cdf = _zipf_cdf(len(plan.general), *GENERAL_ZIPF)
    n_scripts = chars = 0
    for done, d in enumerate(domains, start=1):
        w = _Writer(plan, d, general_cdf)
        dom_dir = os.path.join(out_dir, plan.domains[d].name)
        for i in plan.domains[d].skills:
            sk = plan.skills[i]
            text, scripts = _render(plan, sk, w)
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


def _summary(plan: _Plan, out_dir: Path) -> dict[str, Any]:
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
            "general": len(plan.general) + len(_VERBS) + len(_ADJECTIVES),
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
    plan = _plan(params)
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


def _noisy(word: str, plan: _Plan, d: int, rng: np.random.Generator, p: float) -> str:
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


def _query_text(plan: _Plan, gold: list[_Skill], rng: np.random.Generator) -> str:
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
