"""The synthetic generator's fixed word lists: general English, roles, tooling, I/O types, headings."""

from __future__ import annotations

GENERAL_TAIL_WORDS = 5000  # pseudo-words ranked after the real general nouns (see plan_library)
GENERAL_ZIPF = (1.0, 2.7)  # exponent s and Mandelbrot offset q of the general-vocabulary ranks


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

VERBS = list(dict.fromkeys(GENERAL_VERBS))
ADJECTIVES = list(dict.fromkeys(GENERAL_ADJECTIVES))

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
