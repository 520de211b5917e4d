"""Embedding backends (SPEC §6.8): a local model, texts in, one vector per text out.

`RetrievalConfig.semantic` names one: `wordllama` (the default: its 256-d model ships inside its pip
package, so it works offline and in CI), `model2vec:<folder>` or `sentence-transformers:<folder>` for a
local model of the user's, `none` to switch semantic evidence off. `register_backend` adds others. No
backend ever downloads anything. Each is loaded once per process (`backend_for`)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
import scipy.sparse as sp

NONE = "none"


class SemanticUnavailable(ValueError):
    """The configured embedding backend cannot be loaded (package missing, model folder absent): a
    configuration error, reported as one line by the CLI like any other bad setting."""


class EmbeddingBackend(Protocol):
    """A local embedding model: texts in, one vector per text out (any scale; segos normalises)."""

    @property
    def fingerprint(self) -> str:
        """Changes whenever the vectors would: model identity and version. Part of every cache key."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class WordLlamaBackend:
    """The `wordllama` package's bundled 256-d static model (MIT licence), loaded from the installed
    package folder with downloads disabled (its plain `load()` looks elsewhere and tries the model hub)."""

    def __init__(self, dim: int = 256):
        if dim not in _WORDLLAMA_DIMS:
            raise SemanticUnavailable(f"wordllama dimension must be one of {_WORDLLAMA_DIMS}, not {dim}")
        with _host_logging_kept():
            try:
                import wordllama
                from wordllama import WordLlama
            except ImportError as exc:
                raise SemanticUnavailable(
                    "semantic evidence needs the wordllama package: pip install 'segos[semantic]' "
                    "(or set semantic=none)"
                ) from exc
            folder = Path(wordllama.__file__).parent
            try:
                self._model = WordLlama.load(dim=256, cache_dir=folder, disable_download=True)
            except Exception as exc:  # the package raises several kinds for a missing or damaged weight file
                raise SemanticUnavailable(f"wordllama's bundled model could not be loaded: {exc}") from exc
        version = getattr(wordllama, "__version__", "?")
        self.fingerprint = f"wordllama-{version}-l2_supercat-{dim}"
        # The model's tokenizer pads every batch to its longest text; a copy without padding feeds the
        # unpadded segmented mean below (the model's own tokenizer is left as it is).
        table = getattr(self._model, "embedding", None)
        # The model is Matryoshka-trained: its first `dim` columns are a smaller model of their own. Fewer
        # dimensions are what keeps a brute-force similarity pass over 100k skills cheap (the pass reads
        # the whole vector matrix: 100 MB at 256-d, 25 MB at 64-d).
        self._table = np.ascontiguousarray(table[:, :dim]) if table is not None else None
        self._tokenizer = None
        model_tokenizer = getattr(self._model, "tokenizer", None)
        if model_tokenizer is not None and hasattr(model_tokenizer, "to_str"):
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_str(model_tokenizer.to_str())
            self._tokenizer.no_padding()
            self._tokenizer.no_truncation()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Mean of each text's token embeddings (the model's own pooling) as a sparse count matrix times
        the embedding table: no padding to the longest text of a batch and no row gathered per token."""
        table, tokenizer = self._table, self._tokenizer
        if table is None or tokenizer is None:  # pragma: no cover - a wordllama that changed its internals
            return np.asarray(self._model.embed(list(texts)), dtype=np.float32)
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        if len(texts) <= _FEW:  # a query: gathering its rows beats building a sparse matrix
            for i, text in enumerate(texts):
                ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
                if len(ids):
                    out[i] = table[np.clip(ids, 0, table.shape[0] - 1)].mean(axis=0)
            return out
        for start in range(0, len(texts), _EMBED_CHUNK):
            chunk = list(texts[start : start + _EMBED_CHUNK])
            ids = [enc.ids for enc in tokenizer.encode_batch(chunk, add_special_tokens=False)]
            lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter((i for x in ids for i in x), dtype=np.int64, count=int(lengths.sum()))
            np.clip(flat, 0, table.shape[0] - 1, out=flat)
            rows = np.repeat(np.arange(len(ids)), lengths)
            counts = sp.csr_matrix(
                (np.ones(len(flat), dtype=np.float32), (rows, flat)), shape=(len(ids), table.shape[0])
            )
            # (texts × vocabulary counts) @ (vocabulary × dim): the token sums without gathering a row
            # per token
            sums = np.asarray(counts @ table, dtype=np.float32)
            out[start : start + len(ids)] = sums / np.maximum(lengths, 1)[:, None]
        return out


@contextmanager
def _host_logging_kept() -> Iterator[None]:
    """The root logger as it was before: wordllama calls `logging.basicConfig(level=INFO)` when imported,
    which printed every library's INFO and DEBUG records to a segos user's terminal (`segos eval` showed
    bm25s's "Building index" lines). How a process logs is its host's choice, not a dependency's."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


_WORDLLAMA_DIMS = (64, 128, 256)
_FEW = 8  # texts embedded row by row (a query); more go through one sparse product
_EMBED_CHUNK = 4_096  # texts tokenised at once: bounds the token id lists held in Python


class Model2VecBackend:
    """A model2vec static model from a local folder (`model2vec:<folder>`)."""

    def __init__(self, folder: str):
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise SemanticUnavailable("model2vec:<folder> needs the model2vec package") from exc
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise SemanticUnavailable(f"model2vec model folder not found: {path}")
        self._model = StaticModel.from_pretrained(str(path))
        self.fingerprint = f"model2vec-{_folder_digest(path)}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts)), dtype=np.float32)


class SentenceTransformersBackend:
    """A sentence-transformers model from a local folder (`sentence-transformers:<folder>`), on the CPU."""

    def __init__(self, folder: str):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise SemanticUnavailable(
                "sentence-transformers:<folder> needs the sentence-transformers package"
            ) from exc
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise SemanticUnavailable(f"sentence-transformers model folder not found: {path}")
        self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.fingerprint = f"st-{_folder_digest(path)}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts), batch_size=64), dtype=np.float32)


def _folder_digest(path: Path) -> str:
    """Names, sizes and modification times of a model folder's files: a new model, a new key."""
    h = hashlib.sha256(str(path.resolve()).encode())
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


_FACTORIES: dict[str, Callable[[str], EmbeddingBackend]] = {
    "wordllama": lambda arg: WordLlamaBackend(int(arg) if arg else 256),
    "model2vec": Model2VecBackend,
    "sentence-transformers": SentenceTransformersBackend,
}


def register_backend(scheme: str, factory: Callable[[str], EmbeddingBackend]) -> None:
    """Make `<scheme>[:<argument>]` a valid `semantic` setting; `factory(argument)` builds the backend."""
    _FACTORIES[scheme] = factory
    backend_for.cache_clear()


@lru_cache(maxsize=8)
def backend_for(spec: str) -> EmbeddingBackend | None:
    """The backend a `semantic` setting names (None for `none`); loaded once per process."""
    if not spec or spec == NONE:
        return None
    scheme, _, arg = spec.partition(":")
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(sorted([NONE, *_FACTORIES]))
        raise SemanticUnavailable(f"unknown semantic backend {scheme!r} (known: {known})")
    return factory(arg)
