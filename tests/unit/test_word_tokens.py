"""The byte-level stemmer of indexing against its reference: `word_tokens` must give exactly what
`_token_of` (the query path's stemmer) gives on any input."""

import itertools
import string

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline.graph.parsing import parse_library
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.text.lexicon import field_texts
from segos_pipeline.text.tokens import STOPWORDS, _token_of, tokenize_column, word_tokens

from ..conftest import SHARED_DATA

# Endings that select each of the stemmer's rules, the exceptions to them, and near misses.
_SUFFIXES = [
    *("ies", "sses", "xes", "ches", "shes", "zzes", "s", "ss", "us", "is", "ys", "as", "os"),
    *("ing", "ed", "eed", "e", "es", "ied", "ying", "ings", "eds", "y", "i", "ie", "sh", "ch", "zz", ""),
]
_DOUBLES = [c * 2 for c in string.ascii_lowercase]  # ll, ss, zz, ff are kept; vowels never fold


def _same(words: list[str | None]) -> None:
    got = word_tokens(pl.Series("word", words, dtype=pl.String))
    assert got.dtype == pl.String and got.name == "token"
    assert got.to_list() == [None if w is None else _token_of(w) for w in words]


def test_every_rule_on_every_short_stem_and_doubled_consonant():
    """Each ending after stems of length 0-5 and after every doubled letter: the rules' length limits
    (> 4, > 5, >= 6, >= 7) and the double-consonant rule, exhaustively over a small alphabet."""
    short = (p for k in range(6) for p in itertools.product("aesx", repeat=k) if k < 4 or p[0] == "a")
    stems = ["".join(p) for p in short]
    stems += [f"{h}{d}" for h in ("", "a", "ru", "pla", "contr") for d in _DOUBLES]
    words = [f"{s}{x}" for s, x in itertools.product(stems, _SUFFIXES)]
    _same(words)
    assert len({_token_of(w) for w in words}) > 1_000  # the words do reach distinct rules


_ascii_word = st.builds(
    lambda head, double, suffix: head + double + suffix,
    st.text(alphabet="abcdeilnorstuxyz", min_size=0, max_size=7),
    st.sampled_from(["", *_DOUBLES]),
    st.sampled_from(_SUFFIXES),
)
_alnum_word = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            _ascii_word,
            _alnum_word,
            st.sampled_from(sorted(STOPWORDS)),
            st.from_regex(r"[0-9]{1,6}", fullmatch=True),
        ),
        min_size=0,
        max_size=40,
    )
)
def test_ascii_words_equal_the_python_stemmer(words):
    _same(words)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=12), _ascii_word), min_size=0, max_size=30))
def test_any_words_equal_the_python_stemmer(words):
    """Non-ASCII words (any script, marks, emoji), upper case, punctuation, empty strings and nulls take the
    Python path or are dropped exactly as it does, in place among the ASCII words."""
    _same(words)


def _library_words(nodes: pl.DataFrame) -> list[str]:
    words = field_texts(nodes).select(word=tokenize_column(pl.col("text"))).explode("word")["word"]
    return words.drop_nulls().unique().sort().to_list()


def test_demo_library_words():
    words = _library_words(parse_library(DEFAULT_LIBRARY).nodes)
    assert len(words) > 1_000
    _same(words)


def test_real_library_words():
    if not (SHARED_DATA / "skills").is_dir():
        pytest.skip(f"real skill library not found at {SHARED_DATA / 'skills'} (../shared/data is absent)")
    words = _library_words(parse_library(SHARED_DATA / "skills").nodes)
    assert any(not w.isascii() for w in words)  # both paths are exercised
    _same(words)
