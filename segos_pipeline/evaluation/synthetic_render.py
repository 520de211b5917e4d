"""Rendering one planned synthetic skill as SKILL.md text and scripts."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

from .synthetic_plan import Plan, Skill
from .synthetic_sampling import Sampler, Stream, uniform_cdf, zipf_cdf
from .synthetic_vocabulary import (
    ADJECTIVES,
    ADVERBS,
    ALLOWED_TOOLS,
    FUNCTION_WORDS,
    HEADINGS_NOTES,
    HEADINGS_STEPS,
    HEADINGS_WHEN,
    LICENSES,
    PREPOSITIONS,
    SCRIPT_EXT,
    VERBS,
)


def _q(text: str) -> str:
    """A YAML double-quoted scalar: JSON string syntax is valid YAML, and json.dumps escapes for us."""
    return json.dumps(text)


def _flow(items: Sequence[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


class Writer:
    """Prose for one domain: Zipf draws from the domain vocabulary, the general vocabulary and a little
    from a neighbouring domain (real domains overlap, which gives the join cross-domain candidates)."""

    def __init__(self, plan: Plan, d: int, general_cdf: np.ndarray):
        rng = np.random.default_rng([plan.params["seed"], 2, d])
        self.s = Stream(rng)
        dom = plan.domains[d]
        near = plan.domains[(d + 1) % len(plan.domains)]
        self.dom = Sampler(dom.words, dom.cdf(), rng)
        self.near = Sampler(near.words, near.cdf(), rng)
        self.gen = Sampler(plan.general, general_cdf, rng)
        self.verb = Sampler(VERBS, zipf_cdf(len(VERBS), 1.0), rng)
        self.adj = Sampler(ADJECTIVES, zipf_cdf(len(ADJECTIVES), 1.0), rng)
        self.det = Sampler(FUNCTION_WORDS, uniform_cdf(len(FUNCTION_WORDS)), rng)
        self.prep = Sampler(PREPOSITIONS, uniform_cdf(len(PREPOSITIONS)), rng)

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


def render_package(plan: Plan, sk: Skill, w: Writer) -> tuple[str, list[tuple[str, str]]]:
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


def _script(ext: str, sk: Skill, verb: str) -> str:
    if ext == ".py":
        return (
            f'"""{verb.capitalize()} {" ".join(sk.topic)}."""\nimport sys\n\n\n'
            f"def main() -> None:\n    print(sys.argv[1:])\n\n\nif __name__ == '__main__':\n    main()\n"
        )
    if ext == ".sh":
        return f'#!/usr/bin/env bash\n# {verb} {" ".join(sk.topic)}\nset -euo pipefail\necho "$@"\n'
    return f"// {verb} {' '.join(sk.topic)}\nconsole.log(process.argv.slice(2));\n"
