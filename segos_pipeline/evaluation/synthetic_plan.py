"""The plan of a synthetic library: domains, vocabularies, workflow chains, each skill's fields."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..text.tokens import keep_word, stem
from .synthetic_sampling import Sampler, Stream, zipf_cdf
from .synthetic_vocabulary import (
    DOMAIN_SUFFIXES,
    EXTRA_INPUTS,
    GENERAL_ADJECTIVES,
    GENERAL_NOUNS,
    GENERAL_SYNONYMS,
    GENERAL_TAIL_WORDS,
    GENERAL_VERBS,
    IO_TYPES,
    ROLES,
    TOOLING,
)

_ONSETS = tuple("b c d f g h j k l m n p r s t v w z b d k l m n p r t br dr gr kl pl st tr sh ch th".split())
_VOWELS = ("a", "e", "i", "o", "u", "a", "o", "i", "e", "ai", "ou", "y")
_CODAS = ("", "", "", "", "", "", "n", "r", "l", "x", "m", "t", "nd", "rk", "v", "z")


@dataclass
class Domain:
    name: str
    words: list[str]  # by Zipf rank, most frequent first
    s: float  # Zipf exponent of this domain's vocabulary
    tools: list[str]  # preferred tooling, most used first
    synonym: np.ndarray  # rank → rank of a same-domain word used as a query-time substitute
    skills: list[int] = field(default_factory=list)

    def cdf(self) -> np.ndarray:
        return zipf_cdf(len(self.words), self.s)


@dataclass
class Skill:
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
class Plan:
    params: dict[str, Any]
    general: list[str]
    domains: list[Domain]
    skills: list[Skill]
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


_CHAIN_LENGTHS = (1, 2, 2, 3, 3, 3, 4, 4, 5, 6)


def plan_library(params: dict[str, Any]) -> Plan:
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

    domains: list[Domain] = []
    tool_cdf = zipf_cdf(len(TOOLING), 0.8)
    for d in range(n_dom):
        # A few hundred to a few thousand words (log-uniform), a little more for bigger domains.
        n_words = int(np.clip(np.exp(rng.uniform(np.log(300), np.log(3000))) + sizes[d], 300, 4000))
        words = _pseudo_words(rng, n_words, taken)
        suffix = DOMAIN_SUFFIXES[int(rng.integers(0, len(DOMAIN_SUFFIXES)))]
        tools = list(dict.fromkeys(TOOLING[i] for i in np.searchsorted(tool_cdf, rng.random(12))))
        domains.append(
            Domain(
                name=f"{words[0]}-{suffix}",  # words[0] is globally unique, so is the domain name
                words=words,
                s=float(rng.uniform(0.95, 1.15)),
                tools=tools,
                synonym=rng.permutation(n_words),
            )
        )

    skills: list[Skill] = []
    chains: list[list[int]] = []
    names: set[str] = set()
    role_cdf = zipf_cdf(len(ROLES), 0.7).tolist()
    for d, dom in enumerate(domains):
        drng = np.random.default_rng([seed, 1, d])
        s = Stream(drng)
        vocab = Sampler(dom.words, dom.cdf(), drng)
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
                    Skill(
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
    return Plan(params=params, general=general, domains=domains, skills=skills, chains=chains)


def _unique_name(
    s: Stream,
    topic: list[str],
    chain_topic: list[str],
    role: tuple[str, str],
    vocab: Sampler,
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
