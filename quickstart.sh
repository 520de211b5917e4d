#!/usr/bin/env bash
# One command on a fresh machine: create .venv, install segos, then run the main job on the embedded demo
# data shipped in segos_pipeline/demo with Dagster (cold start of its library, then the evolution windows of
# its traces: 2026-11-27 and 2026-11-28, copied into the store's landing folder as agents' traces would
# land), and show the result with the CLI: versions, what evolution changed, then a before / after (a
# held-out task's bundle and the held-out replay, cold start vs evolved) and the next steps.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
# SEGOS_SKIP_INSTALL=1 reuses an existing .venv as it is (offline re-runs; the README test runs it so)
if [ "${SEGOS_SKIP_INSTALL:-0}" != 1 ]; then
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
fi
export SEGOS_STORE=${SEGOS_STORE:-data/store}
export DAGSTER_HOME=${DAGSTER_HOME:-$PWD/data/dagster_home}   # run history survives (git-ignored)
mkdir -p "$DAGSTER_HOME"
DEMO=segos_pipeline/demo
LANDING=${SEGOS_LANDING:-$SEGOS_STORE/landing}   # the default landing folder: STORE/landing
mkdir -p "$LANDING"
for f in "$DEMO"/traces/2026-11-27.jsonl "$DEMO"/traces/2026-11-28.jsonl; do   # never over a landed file
  [ -e "$LANDING/$(basename "$f")" ] || cp "$f" "$LANDING"/
done
# The named jobs (not ad-hoc asset selections), so that the runs show in the UI as cold_start_job and
# evolution_job; a window is the job's partition, given as the run's dagster/partition tag.
run_job() { .venv/bin/dagster job execute -m assets.definitions -d . -j "$@" >/dev/null 2>&1 \
  || { echo "dagster run failed: dagster job execute -m assets.definitions -d . -j $*" >&2; exit 1; }; }
echo "== Dagster: cold_start_job, the cold start of the demo library ($DEMO/library) into $SEGOS_STORE"
run_job cold_start_job
for window in 2026-11-27 2026-11-28; do
  echo "== Dagster: evolution_job, window $window (traces landed in $LANDING)"
  run_job evolution_job --tags "{\"dagster/partition\": \"$window\"}"
done
# The CLI of this checkout (the code the Dagster runs above used), whichever `segos` PATH holds.
segos() { .venv/bin/python -m segos_pipeline.cli "$@"; }
echo "== versions"
segos versions
read -r COLD LATEST < <(segos versions --json | .venv/bin/python -c '
import json, sys
v = json.load(sys.stdin)
print([m["version"] for m in v if m["kind"] == "cold_start"][-1], v[-1]["version"])')
echo "== what the two windows changed ($COLD -> $LATEST)"
segos diff "$COLD" "$LATEST" --limit 8
# A held-out task (not one of the traces' tasks) that needs a chain of four skills: the traces' modelling
# runs teach that chain, so its bundle is where evolution shows.
TASK=$(.venv/bin/python -c 'import json, sys
print(next(q["query"] for q in map(json.loads, open(sys.argv[1])) if q["task"] == "house-price-xgb"))' \
  "$DEMO"/queries/holdout.jsonl)
echo
echo "== before / after: one task's bundle, cold start (before) vs evolved (after)"
segos compare "$COLD" "$LATEST" --query "$TASK" --queries "$DEMO"/queries/holdout.jsonl --k 5
echo
echo "== next steps"
echo "  open the UI (the runs above are in it):"
echo "      DAGSTER_HOME=$DAGSTER_HOME .venv/bin/dagster dev     # http://127.0.0.1:3000"
echo "  connect an agent (Claude Code; other clients: .venv/bin/segos mcp --print-config, docs/mcp.md):"
echo "      claude mcp add-json segos \"\$(.venv/bin/segos mcp --print-config server)\""
echo "  your own skills: .venv/bin/segos build /path/to/library, or SEGOS_LIBRARY in Dagster (docs/dagster.md)"
