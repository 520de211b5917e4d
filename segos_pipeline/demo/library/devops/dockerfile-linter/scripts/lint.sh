#!/usr/bin/env bash
set -euo pipefail
file="${1:-Dockerfile}"
if ! command -v hadolint >/dev/null; then
  echo "hadolint not found; using container image" >&2
  docker run --rm -i hadolint/hadolint hadolint --format json - < "$file" > /tmp/hadolint.json || true
else
  hadolint --format json "$file" > /tmp/hadolint.json || true
fi
jq -r '.[] | "\(.level)\tline \(.line)\t\(.code)\t\(.message)"' /tmp/hadolint.json | sort
grep -nE '^\s*ENV\s+.*(PASSWORD|SECRET|TOKEN|KEY)=' "$file" && echo "warning: secret-like ENV" || true
grep -nE 'curl[^|]*\|\s*(ba)?sh' "$file" && echo "warning: curl | sh pattern" || true
grep -q '^HEALTHCHECK' "$file" || echo "info: no HEALTHCHECK instruction"
