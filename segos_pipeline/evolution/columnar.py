"""The columnar fast path of native trace lines: a batch parsed by pyarrow, the contract checked by polars.

`vouch(texts)` returns the rows of the lines it can vouch for, as native columns (`NATIVE_ARROW`) with
each row's position in the batch; every other line is left to the per-line pydantic validation
(`traces.validate_line`), so a rejection and its reason are always the model's own. The fast path only
vouches for a line when the model would accept it and produce exactly these values; when in doubt it
leaves the line to the model, which costs time, never a different result. It vouches for a line when:

- the line is UTF-8, starts with `{` and ends with `}` (surrounding JSON whitespace aside), spells no
  key with a `\\u00XX` escape and gives `agent`, `attempt` or `simulated` no `null` (pyarrow reads a
  null as absent, where the model rejects it);
- pyarrow's reader, with an explicit schema of the contract's keys, parses it with no unexpected key at
  any level (extras, `ctrf` and unknown query keys are left to the model), no repeated key, strict
  types (a number is never read as a string nor a float as an integer) and valid UTF-8 without lone
  surrogates; the lines of a chunk are parsed as one buffer, and a chunk the reader refuses is halved
  until the lines it refuses are isolated (within a parse budget);
- the parsed values satisfy the contract's bounds as polars expressions: ids and names present,
  1..MAX_* characters and without leading or trailing whitespace (so stripping changes nothing), list
  lengths, no null list items or query objects, `attempt` in range, `reward` finite in [0, 1], and the
  timestamp already in segos' canonical form `YYYY-MM-DDTHH:MM:SSZ` with a real calendar date (other
  forms, which the model normalises, are left to it); a trace without `trace_id` (its id is derived
  from the model's dump) is left to the model too.

Why one line maps to one row: every line handed to the reader starts with `{` and ends with `}`, so an
object continued on the next line would need `} {` inside a container, which is not JSON; a chunk whose
row count differs from its line count (two objects on one line) is refused like any other.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.json as pa_json

from ..config import (
    MAX_ATTEMPT,
    MAX_ID_CHARS,
    MAX_LINE_BYTES,
    MAX_NAME_CHARS,
    MAX_QUERIES,
    MAX_SKILLS,
    MAX_TEXT_CHARS,
)
from .traces import CANONICAL_TS, CANONICAL_YEARS

# The reader's block: a line must fit in one (MAX_LINE_BYTES), and a batch of several blocks keeps both
# cores busy.
PARSE_BLOCK = max(4 << 20, 2 * MAX_LINE_BYTES)
# A refused chunk is halved down to this many lines; smaller ones go to the model whole.
PARSE_MIN_CHUNK = 16
# Lines a refused chunk may hand to the reader again, as a multiple of its lines: enough to isolate a few
# refused lines in a batch (about log2 of their number plus two parses), bounded when there are many.
PARSE_BUDGET = 6
# A refused batch is probed on its first 1/PROBE_SHARE lines before the rest is parsed again.
PROBE_SHARE = 16

_SKILLS = pa.list_(pa.string())
NATIVE_ARROW = pa.schema(
    [
        ("trace_id", pa.string()),
        ("task_id", pa.string()),
        ("agent", pa.string()),
        ("attempt", pa.int64()),
        ("timestamp", pa.string()),
        ("queries", pa.list_(pa.struct([("text", pa.string()), ("retrieved", _SKILLS), ("seeds", _SKILLS)]))),
        ("used", _SKILLS),
        ("reward", pa.float64()),
        ("simulated", pa.bool_()),
    ]
)
# Every character Python calls whitespace (a superset of Unicode White_Space, which pydantic-core strips;
# none lies beyond the BMP): a string that starts or ends with none of them is what stripping leaves it.
EDGE_WHITESPACE = "".join(c for c in map(chr, range(0x10000)) if c.isspace())
_NULLED_DEFAULT = r'"(?:agent|attempt|simulated)"\s*:\s*null'
_ESCAPED_ASCII = r"\\u00[2-7][0-9a-fA-F]"  # could spell a key the null check must see
_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_READ = pa_json.ReadOptions(use_threads=True, block_size=PARSE_BLOCK)
_PARSE = pa_json.ParseOptions(explicit_schema=NATIVE_ARROW, unexpected_field_behavior="error")


@dataclass
class Vouched:
    """Rows of the lines the fast path vouches for (native columns, `_i` = position in the batch)."""

    frame: pl.DataFrame
    parsed: int  # lines handed to the reader
    refused: int  # of those, lines in chunks the reader refused (or left unread after a refused probe)


class Reader:
    """Parses the candidate lines of a run's batches. A batch the reader refuses is probed on its first
    lines: when most of those are refused too (e.g. every line carries an extra key), the batch is left to
    the model whole, and the next batch starts with such a probe instead of a full parse, so input the
    fast path cannot take costs a small share of a parse, not several."""

    def __init__(self) -> None:
        self.refusing = False
        self.lines_read = 0  # lines handed to pyarrow, retries included (what the fast path spent)

    def parse(
        self, lines: list[bytes], candidates: np.ndarray, buffer: bytes
    ) -> tuple[list[pl.DataFrame], int]:
        """The candidate lines as parsed chunks (with `_i`), and how many were refused. `buffer` is all the
        lines joined, parsed as it is when every line is a candidate."""
        if not len(candidates):
            return [], 0
        if not self.refusing:
            whole = self._chunk_frame(lines, candidates, buffer if len(candidates) == len(lines) else None)
            if whole is not None:
                return [whole], 0
        size = max(len(candidates) // PROBE_SHARE, 4 * PARSE_MIN_CHUNK)
        probe, rest = candidates[:size], candidates[size:]
        got, refused = self._bisect(lines, probe)
        self.refusing = 2 * refused > len(probe)
        if self.refusing:
            return got, refused + len(rest)
        more, refused_more = self._bisect(lines, rest)
        return got + more, refused + refused_more

    def _chunk_frame(
        self, lines: list[bytes], chunk: np.ndarray, joined: bytes | None = None
    ) -> pl.DataFrame | None:
        """The chunk's lines parsed as one buffer (with `_i`), or None when the reader refuses it or finds a
        different number of objects than lines. Every line but a file's last ends with its newline, and that
        one is last in its chunk."""
        self.lines_read += len(chunk)
        table = _read_or_none(joined if joined is not None else b"".join([lines[i] for i in chunk.tolist()]))
        if table is None or table.num_rows != len(chunk):
            return None
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.with_columns(_i=pl.Series(chunk, dtype=pl.Int64))

    def _bisect(self, lines: list[bytes], candidates: np.ndarray) -> tuple[list[pl.DataFrame], int]:
        """The lines parsed in chunks; a chunk the reader refuses is halved, and its lines are left to the
        model once it is below PARSE_MIN_CHUNK lines or the parse budget (PARSE_BUDGET times the lines) is
        spent. Returns the parsed chunks (in line order) and how many lines were refused."""
        out: list[pl.DataFrame] = []
        budget = PARSE_BUDGET * len(candidates)
        spent, refused = 0, 0
        stack = [candidates] if len(candidates) else []
        while stack:
            chunk = stack.pop()
            frame = self._chunk_frame(lines, chunk)
            spent += len(chunk)
            if frame is not None:
                out.append(frame)
            elif len(chunk) >= 2 * PARSE_MIN_CHUNK and spent + len(chunk) <= budget:
                half = len(chunk) // 2
                stack += [chunk[half:], chunk[:half]]  # the first half next: chunks come out in line order
            else:
                refused += len(chunk)
        return out, refused


def vouch(lines: list[bytes], reader: Reader | None = None) -> Vouched:
    """The lines of a batch the fast path vouches for; `reader` carries what earlier batches of the run
    taught (a new one when None)."""
    buffer = b"".join(lines)
    candidates = np.flatnonzero(_line_shape_ok(_strings(lines, buffer)))
    chunks, refused = (reader or Reader()).parse(lines, candidates, buffer)
    if not chunks:
        return Vouched(_empty(), len(candidates), refused)
    frame = pl.concat(chunks, how="vertical")
    return Vouched(frame.filter(contract_ok(frame)), len(candidates), refused)


# ------------------------------------------------------------------------------------ before parsing


def _strings(lines: list[bytes], buffer: bytes) -> pl.Series:
    """The lines as a string column (null where a line is not UTF-8), made from the joined buffer and the
    line offsets in one piece; line by line only when some line is not UTF-8."""
    offsets = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)), out=offsets[1:])
    column = pa.LargeStringArray.from_buffers(len(lines), pa.py_buffer(offsets), pa.py_buffer(buffer))
    try:
        column.validate(full=True)  # UTF-8 of every line (a line cut inside a character fails too)
    except pa.ArrowInvalid:
        return pl.Series("line", [_decoded(line) for line in lines], dtype=pl.String)
    series = pl.from_arrow(column)
    assert isinstance(series, pl.Series)
    return series.alias("line")


def _decoded(line: bytes) -> str | None:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _line_shape_ok(line: pl.Series) -> np.ndarray:
    """Lines worth handing to the reader: UTF-8, one object, no key the reader could misread as absent.
    Cheap literal tests first; the regular expressions run only on the few lines they leave in doubt."""
    ok = (
        line.is_not_null()
        & (line.str.len_bytes() <= MAX_LINE_BYTES)
        & ~line.str.contains('"ctrf"', literal=True)  # the reader has no column for a CTRF report
    ).fill_null(False)
    plain = (
        line.str.starts_with("{")
        & (line.str.ends_with("}\n") | line.str.ends_with("}"))
        & ~line.str.contains("null", literal=True)
        & ~line.str.contains("\\u", literal=True)
    ).fill_null(False)
    doubt = np.flatnonzero((ok & ~plain).to_numpy())
    mask = ok.to_numpy().copy()
    if len(doubt):
        mask[doubt] = _doubtful_ok(line.gather(doubt))
    return mask


def _doubtful_ok(line: pl.Series) -> np.ndarray:
    high, low = line.str.count_matches(_HIGH), line.str.count_matches(_LOW)
    pairs = line.str.count_matches(_HIGH + _LOW)
    ok = (
        line.str.contains(r"^[ \t\r\n]*\{")
        & line.str.contains(r"\}[ \t\r\n]*$")
        & ~line.str.contains(_ESCAPED_ASCII)
        & ~line.str.contains(_NULLED_DEFAULT)
        # a lone surrogate makes the reader refuse the whole chunk: leave such lines out up front
        & (high == pairs)
        & (low == pairs)
    )
    return ok.fill_null(False).to_numpy()


# ------------------------------------------------------------------------------------------- parsing


def _read_or_none(buffer: bytes) -> pa.Table | None:
    """The lines of `buffer` as one table, or None when the reader refuses any of them."""
    try:
        return pa_json.read_json(io.BytesIO(buffer), read_options=_READ, parse_options=_PARSE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _empty() -> pl.DataFrame:
    frame = pl.from_arrow(NATIVE_ARROW.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.with_columns(_i=pl.Series([], dtype=pl.Int64))


# ---------------------------------------------------------------------------------- the contract


def text_ok(expr: pl.Expr, max_chars: int) -> pl.Expr:
    """A present string of 1..max_chars characters that stripping leaves as it is."""
    return (
        expr.is_not_null()
        & expr.str.len_chars().is_between(1, max_chars)
        & (expr.str.strip_chars(EDGE_WHITESPACE).str.len_bytes() == expr.str.len_bytes())
    )


def _list_ok(expr: pl.Expr, max_items: int) -> pl.Expr:
    return expr.is_not_null() & (expr.list.len() <= max_items)


def _timestamp_ok(ts: pl.Expr) -> pl.Expr:
    """Canonical UTC timestamps within the contract's years with a real date: the only form the model keeps
    as given (the pattern and years are the model's own, `traces.CANONICAL_TS` and `CANONICAL_YEARS`)."""
    first, last = CANONICAL_YEARS
    return (
        ts.str.contains(f"^{CANONICAL_TS}$")
        & ts.str.slice(0, 4).is_between(pl.lit(first), pl.lit(last))
        & ts.str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False).is_not_null()
    )


def contract_ok(frame: pl.DataFrame) -> pl.Series:
    """Per row: the parsed values satisfy the contract exactly as given (bounds, lengths, no nulls where
    the model wants a value)."""
    c = pl.col
    row = frame.select(
        text_ok(c("trace_id"), MAX_ID_CHARS)
        & text_ok(c("task_id"), MAX_ID_CHARS)
        & (c("agent").is_null() | text_ok(c("agent"), MAX_NAME_CHARS))
        & (c("attempt").is_null() | c("attempt").is_between(1, MAX_ATTEMPT))
        & (c("timestamp").is_null() | _timestamp_ok(c("timestamp")))
        & (c("queries").is_null() | (c("queries").list.len() <= MAX_QUERIES))
        & _list_ok(c("used"), MAX_SKILLS)
        & c("reward").is_not_null()
        & c("reward").is_finite()
        & c("reward").is_between(0.0, 1.0)
    ).to_series()
    bad = pl.concat([_bad_queries(frame), _bad_refs(frame)])
    return (row & ~frame["_i"].is_in(bad.implode())).fill_null(False).alias("ok")


def _bad_queries(frame: pl.DataFrame) -> pl.Series:
    """`_i` of rows with a query that is null, lacks a valid text, or lists too many skills."""
    q = pl.col("q")
    queries = frame.select("_i", q=pl.col("queries")).filter(q.is_not_null()).explode("q")
    ok = (
        q.is_not_null()
        & text_ok(q.struct.field("text"), MAX_TEXT_CHARS)
        & (q.struct.field("retrieved").is_null() | _list_ok(q.struct.field("retrieved"), MAX_SKILLS))
        & (q.struct.field("seeds").is_null() | _list_ok(q.struct.field("seeds"), MAX_SKILLS))
    )
    return queries.filter(~ok.fill_null(False))["_i"]


def _bad_refs(frame: pl.DataFrame) -> pl.Series:
    """`_i` of rows with a skill reference (used, retrieved or seeds) that is null or not a valid name.
    Names repeat across traces, so each distinct one is checked once."""
    q = pl.col("q")
    queries = frame.select("_i", q=pl.col("queries")).filter(q.is_not_null()).explode("q").drop_nulls("q")
    lists = [
        frame.select("_i", ref=pl.col("used")),
        queries.select("_i", ref=q.struct.field("retrieved")),
        queries.select("_i", ref=q.struct.field("seeds")),
    ]
    refs = pl.concat([x.filter(pl.col("ref").is_not_null()).explode("ref") for x in lists])
    names = refs["ref"].unique()
    bad = names.filter(~names.to_frame().select(text_ok(pl.col("ref"), MAX_NAME_CHARS)).to_series())
    nulls = refs.filter(pl.col("ref").is_null())["_i"]
    if bad.is_empty():
        return nulls
    return pl.concat([nulls, refs.filter(pl.col("ref").is_in(bad.implode()))["_i"]])
