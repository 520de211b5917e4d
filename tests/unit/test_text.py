import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline.text.names import SkillNames
from segos_pipeline.text.tokens import (
    normalize_name,
    normalize_names,
    stem,
    tokenize,
    tokenize_column,
)

from ..string_tokens import stem_frame


def test_stemmer_folds_plurals_without_mangling():
    assert stem("class") == "class"  # GoS strips every trailing s: "cla"
    assert stem("analysis") == "analysis"
    assert stem("status") == "status"
    assert stem("files") == stem("file") == "file"
    assert stem("libraries") == stem("library")
    assert stem("matches") == stem("match")
    assert stem("processing") == stem("process")
    assert stem("parsing") == stem("parse") == stem("parses")
    assert stem("encoding") == stem("encode")
    assert stem("running") == "run"


def test_short_technical_tokens_kept():
    assert tokenize("Render a 3D mesh with JS, export CSV for AI") == [
        "render",
        "3d",
        "mesh",
        "js",
        "export",
        "csv",
        "ai",
    ]


def test_stopwords_numbers_and_single_chars_dropped():
    assert tokenize("the file of 2024 is a x") == ["file"]
    assert tokenize("snake_case-and.dotted") == [stem("snake"), "case", "dot"]


def test_normalize_name_matching_rule():
    assert normalize_name("CSV-Processing") == normalize_name("csv_processing") == "csvprocessing"


# Characters this Python's Unicode database knows; Rust's may be newer (a letter Python calls unassigned
# is the one known divergence between the two engines, documented in text.py).
_ASSIGNED = st.characters(exclude_categories=("Cn", "Cs"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=_ASSIGNED, min_size=0, max_size=60), min_size=1, max_size=8))
def test_polars_tokenisation_equals_python(texts):
    """Indexing (vectorised) and querying (Python) must see identical tokens for identical text."""
    _assert_tokens_equal_python(texts)


def test_polars_tokenisation_equals_python_on_unicode_edges():
    """A final sigma (lowercased by its context: ς at a word's end, σ before a cased letter past an
    apostrophe), Kelvin sign to ASCII k, a combining mark, a dotted İ, superscripts, emoji, underscores."""
    _assert_tokens_equal_python(["h_i-J2", "  x  ", "ΑΒΓ déf", "K\u212a", "x\u0301y", "ΟΔΟΣ x'Σ'Α ΣΑΣ."])
    _assert_tokens_equal_python(["İstanbul straße", "a\u00b2b ٣4 ①x", "🙂emoji_ok", ""])


def _assert_tokens_equal_python(texts: list[str]) -> None:
    frame = pl.DataFrame({"row": range(len(texts)), "text": texts})
    words = frame.select("row", word=tokenize_column(pl.col("text"))).explode("word").drop_nulls("word")
    stems = stem_frame(words["word"])
    joined = words.with_row_index("pos").join(stems, on="word", how="inner").sort("pos")
    for i, text in enumerate(texts):
        assert joined.filter(pl.col("row") == i)["token"].to_list() == tokenize(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=30), st.text(max_size=30)),
        min_size=1,
        max_size=10,
    )
)
def test_vectorised_name_normalisation_equals_python(names):
    """Duplicate-name checks over a whole library use the vectorised form; it must be the same rule."""
    assert normalize_names(pl.Series("name", names)).to_list() == [normalize_name(n) for n in names]


def test_skill_names_resolve_most_specific_first():
    nodes = pl.DataFrame(
        {
            "id": ["lib/csv-tools", "lib/Chart_Maker", "other/plot", "x/Ünïcode-Skill"],
            "folder": ["csv-tools", "Chart_Maker", "plot", "Ünïcode-Skill"],
            "name": ["chart-maker", "chart maker", "csv tools", "!!!"],
        }
    )
    names = SkillNames(nodes)
    assert names.resolve("lib/csv-tools") == [0]  # exact id
    assert names.resolve("CSV Tools") == [0, 2]  # folder of 0 before the borrowed name of 2
    assert names.resolve("chart-maker") == [1, 0]  # folder (and name) of 1 before the name of 0
    assert names.resolve("ünïcode skill") == [3]  # non-ASCII names follow the same rule
    assert (
        names.resolve("!!!") == [] and names.resolve("nothing") == []
    )  # a name of only punctuation is no key
