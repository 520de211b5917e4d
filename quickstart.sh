#!/usr/bin/env bash
# One command on a fresh machine: create .venv, install segos, build the cold-start graph version of the
# embedded demo library (data/library) into data/store, answer a task query and replay the demo queries.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
export SEGOS_STORE=${SEGOS_STORE:-data/store}
echo "== build the cold-start version of data/library into $SEGOS_STORE"
.venv/bin/segos build
echo "== versions"
.venv/bin/segos versions
echo "== a bundle for one task"
.venv/bin/segos retrieve "turn the recorded product demo video into an English subtitle file"
echo "== replay of data/queries/demo.jsonl"
.venv/bin/segos replay data/queries/demo.jsonl --k 5
