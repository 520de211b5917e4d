"""Tokenisation shared by indexing (vectorised, in polars and numpy) and querying (plain Python).

Both paths must produce identical tokens for identical text, so the rules live here once: lowercase,
split on anything that is not a letter or digit, drop stopwords and pure numbers, then a light stemmer
that folds plurals and -ing/-ed forms without mangling words ("class" stays "class", unlike GoS' strip of
every trailing "s"). Short technical tokens (`3d`, `ai`, `js`, `csv`) are kept.

Indexing cuts words with the polars regex `POLARS_TOKEN_PATTERN` (`tokenize_column`), the same rule as
`_TOKEN_RE`, and stems each distinct word once with `word_tokens`: the stemmer's rules restated on the
UTF-8 bytes of ASCII words with numpy, the Python stemmer for any other word. Property tests hold the regex
equal to `_TOKEN_RE` (tests/unit/test_text.py) and `word_tokens` equal to `_token_of`
(tests/unit/test_word_tokens.py).
"""

from __future__ import annotations

import re
import string
from functools import lru_cache

import numpy as np
import polars as pl
import pyarrow as pa

from ..arrays import ranges

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
    `explode` on the distinct words only, see `word_tokens`)."""
    return texts.str.to_lowercase().str.extract_all(POLARS_TOKEN_PATTERN)


def word_tokens(words: pl.Series) -> pl.Series:
    """`_token_of` of each word (null for a word that carries no signal, or a null), in order.

    Words of ASCII letters and digits (nearly every word of a library) are stemmed on their UTF-8 bytes
    with numpy, the rules of `keep_word` and `stem` restated on byte positions; any other word takes the
    Python path, exactly as `normalize_names` splits ASCII from non-ASCII. Meant for distinct words."""
    offsets, data = _utf8_buffers(words)
    n = np.diff(offsets)
    # letters in the low half of one running count, digits in the high half: one pass over the bytes
    letter = (data - np.uint8(ord("a"))) < 26  # uint8 wrap-around: one compare per range
    digit = (data - np.uint8(ord("0"))) < 10
    running = np.concatenate(([0], np.cumsum(letter | (digit.astype(np.int64) << 32))))
    counts = running[offsets[1:]] - running[offsets[:-1]]
    letters, digits = counts & 0xFFFFFFFF, counts >> 32
    present = words.is_not_null().to_numpy()
    plain = (letters + digits == n) & present
    keep = plain & (n > 1) & (digits < n) & ~words.is_in(_STOPWORDS.implode()).fill_null(False).to_numpy()
    length, ies = _stem_lengths(data, offsets, n, keep & (letters == n) & (n > 4))
    tokens = _prefixes(data, offsets[:-1], np.where(keep, length, 0), ies, keep)
    rows = np.flatnonzero(~plain & present)
    if not len(rows):
        return tokens
    slow = [_token_of(w) for w in words.gather(rows).to_list()]
    return tokens.scatter(rows, pl.Series(slow, dtype=pl.String))


_STOPWORDS = pl.Series(sorted(STOPWORDS), dtype=pl.String)
# The consonants whose doubling `stem` undoes after -ing/-ed (derived from its own regex and exceptions).
_UNDOUBLE = np.zeros(256, dtype=bool)
_UNDOUBLE[
    [ord(c) for c in string.ascii_lowercase if _DOUBLE_CONSONANT.search(c * 2) and c * 2 not in _KEEP_DOUBLE]
] = True


def _utf8_buffers(words: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes): word i is bytes[offsets[i]:offsets[i + 1]] (a null is empty), offsets from 0."""
    array = words.cast(pl.String).fill_null("").rechunk().to_arrow().cast(pa.large_string())
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0] : offsets[-1]]


def _at(data: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The bytes at `positions`, 0 where a position falls outside the text (a word shorter than asked)."""
    inside = (positions >= 0) & (positions < len(data))
    return np.where(inside, data[np.where(inside, positions, 0)] if len(data) else 0, 0)


def _ends(tails: np.ndarray, *suffixes: str) -> np.ndarray:
    """Whether each word ends with one of `suffixes`, given its last bytes (`_tails`)."""
    out = np.zeros(tails.shape[1], dtype=bool)
    for suffix in suffixes:
        out |= (tails[: len(suffix)] == np.frombuffer(suffix[::-1].encode(), np.uint8)[:, None]).all(axis=0)
    return out


def _tails(data: np.ndarray, offsets: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """Row i: each word's i-th last byte (0 past its start), for i < k."""
    back = np.arange(1, k + 1)[:, None]
    return np.where(back <= n, _at(data, offsets[1:] - back), 0).astype(np.uint8)


def _stem_lengths(
    data: np.ndarray, offsets: np.ndarray, n: np.ndarray, stems: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(the length of each word's token, whether it ends in a "y" put in place of "ies"), `stem` on bytes
    for the `stems` words (alphabetic, longer than four) and the word itself for the others. The rules'
    order is `stem`'s elif chain: np.select takes the first that holds."""
    tails = _tails(data, offsets, n, 4)
    rule = np.select(
        [
            _ends(tails, "ies") & (n > 5),
            _ends(tails, "sses", "xes", "ches", "shes", "zzes"),
            _ends(tails, "s") & ~_ends(tails, "ss", "us", "is", "ys", "as", "os"),
            _ends(tails, "ing") & (n >= 7),
            _ends(tails, "ed") & (n >= 6) & ~_ends(tails, "eed"),
        ],
        [1, 2, 3, 4, 5],
        0,
    )
    rule = np.where(stems, rule, 0)
    kept = n - np.array([0, 3, 2, 1, 3, 2])[rule]
    start = offsets[:-1]
    last, before = _at(data, start + kept - 1), _at(data, start + kept - 2)
    kept -= (rule >= 4) & (last == before) & _UNDOUBLE[last]  # -ing/-ed after a doubled consonant
    ies = rule == 1
    kept += ies  # the "y"
    kept -= stems & ~ies & (kept > 4) & (_at(data, start + kept - 1) == ord("e"))
    return kept, ies


def _prefixes(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, ies: np.ndarray, valid: np.ndarray
) -> pl.Series:
    """The string column of each word's first `lengths` bytes, its last byte a "y" where `ies`; null where
    not `valid`."""
    offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    source = ranges(starts, starts + lengths)
    out = data[source] if len(source) else np.zeros(0, dtype=np.uint8)
    out[offsets[1:][ies & valid] - 1] = ord("y")
    array = pa.LargeStringArray.from_buffers(
        len(lengths),
        pa.py_buffer(offsets),
        pa.py_buffer(out),
        pa.py_buffer(np.packbits(valid, bitorder="little")),
    )
    return pl.Series("token", array, dtype=pl.String)
