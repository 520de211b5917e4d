"""Tokenisation shared by indexing (vectorised, in polars) and querying (plain Python).

Both paths must produce identical tokens for identical text, so the rules live here once: lowercase,
split on anything that is not a letter or digit, drop stopwords and pure numbers, then a light stemmer
that folds plurals and -ing/-ed forms without mangling words ("class" stays "class", unlike GoS' strip of
every trailing "s"). Short technical tokens (`3d`, `ai`, `js`, `csv`) are kept.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

# Letters and digits of any script; underscores split words (snake_case names become two tokens).
# Python's `[^\W_]` is exactly "str.isalnum()", i.e. Unicode categories L* and N*, which the Rust regex
# engine behind polars spells `[\p{L}\p{N}]`; the two must stay equivalent (a property test checks it).
# They can only differ on characters newer than this Python's Unicode database, which it sees as
# unassigned: a query naming such a character may miss the skill that contains it.
_TOKEN_RE = re.compile(r"[^\W_]+")
POLARS_TOKEN_PATTERN = r"[\p{L}\p{N}]+"

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either else etc few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself just
    let may me might more most must my myself no nor not now of off on once only or other our ours
    ourselves out over own per same shall she should so some such than that the their theirs them
    themselves then there these they this those through thus to too under until up upon us very via was
    we were what when where whether which while who whom whose why will with within without would you
    your yours yourself yourselves e g ie eg also
    """.split()
)

_DOUBLE_CONSONANT = re.compile(r"([b-df-hj-np-tv-z])\1$")
_KEEP_DOUBLE = ("ll", "ss", "zz", "ff")


@lru_cache(maxsize=1 << 18)
def stem(word: str) -> str:
    """Light, deterministic suffix folding.

    Only alphabetic words longer than four characters are touched, so acronyms and short technical
    tokens survive. A final "e" is dropped after suffix removal so "parse", "parses" and "parsing" all
    fold to "pars" and "encode"/"encoding" to "encod".
    """
    if len(word) <= 4 or not word.isalpha():
        return word
    w = word
    if w.endswith("ies") and len(w) > 5:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "ches", "shes", "zzes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is", "ys", "as", "os")):
        w = w[:-1]
    elif w.endswith("ing") and len(w) >= 7:
        w = w[:-3]
        if _DOUBLE_CONSONANT.search(w) and not w.endswith(_KEEP_DOUBLE):
            w = w[:-1]
    elif w.endswith("ed") and len(w) >= 6 and not w.endswith("eed"):
        w = w[:-2]
        if _DOUBLE_CONSONANT.search(w) and not w.endswith(_KEEP_DOUBLE):
            w = w[:-1]
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


def keep_word(word: str) -> bool:
    """Stopwords, single characters and pure numbers carry no retrieval signal."""
    return len(word) > 1 and word not in STOPWORDS and not word.isdigit()


@lru_cache(maxsize=1 << 18)
def _token_of(word: str) -> str | None:
    """The token a raw word becomes, or None for a word that carries no signal (one cached call per
    word: a task text repeats most of its words, and queries repeat each other's)."""
    return stem(word) if keep_word(word) else None


def tokenize(text: str) -> list[str]:
    """Tokens of `text` in order, with repeats (term frequency matters for BM25)."""
    tokens = map(_token_of, _TOKEN_RE.findall(text.lower()))
    return [t for t in tokens if t is not None]


def token_set(text: str) -> set[str]:
    return set(tokenize(text))


_NON_ALNUM = re.compile(r"[\W_]+")


def normalize_name(name: str) -> str:
    """The matching rule for naming skills (shared README): casefold, drop non-alphanumerics."""
    return _NON_ALNUM.sub("", name.casefold())


def normalize_names(names: pl.Series) -> pl.Series:
    """`normalize_name` of every name, vectorised: on ASCII text lowercasing is casefolding and `[\\W_]` is
    `[^a-z0-9]` after it, so only the rare non-ASCII names take the Python path (exactly the same rule)."""
    names = names.fill_null("")
    ascii_only = names.str.contains(r"^[\x00-\x7f]*$")
    fast = names.str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "")
    if bool(ascii_only.all()):
        return fast
    rows = (~ascii_only).arg_true()
    slow = [normalize_name(x) for x in names.gather(rows).to_list()]
    return fast.scatter(rows, slow)


def tokenize_column(texts: pl.Expr) -> pl.Expr:
    """Raw word lists of a text column, the vectorised half of `tokenize` (stemming is applied after
    `explode` on the unique words only, see `stem_frame`)."""
    return texts.str.to_lowercase().str.extract_all(POLARS_TOKEN_PATTERN)


def word_tokens(words: pl.Series) -> pl.Series:
    """The token each word becomes (null for a word that carries no signal), in order. Meant for distinct
    words: it is the one Python step of indexing, and `_token_of`'s cache makes a word seen before (in any
    earlier chunk of this process) a dictionary lookup rather than a stemming."""
    return pl.Series("token", [_token_of(w) for w in words.to_list()], dtype=pl.String)


def stem_frame(words: pl.Series) -> pl.DataFrame:
    """Map each distinct raw word to its token, dropping words that carry no signal.

    Runs the Python stemmer once per distinct word, not once per occurrence, which keeps indexing of
    large libraries vectorised.
    """
    unique = words.unique().drop_nulls()
    kept = [w for w in unique.to_list() if keep_word(w)]
    return pl.DataFrame(
        {"word": kept, "token": [stem(w) for w in kept]},
        schema={"word": pl.String, "token": pl.String},
    )
