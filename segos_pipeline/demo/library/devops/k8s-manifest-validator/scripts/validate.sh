#!/usr/bin/env bash
set -euo pipefail
dir="$1"
version="${2:-1.30.0}"
kubeconform -strict -summary -output json \
  -kubernetes-version "$version" \
  -schema-location default \
  -schema-location 'https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json' \
  "$dir" > /tmp/kubeconform.json || true
jq -r '.resources[] | select(.status != "statusValid") | "\(.status)\t\(.kind)/\(.name)\t\(.msg)"' /tmp/kubeconform.json
kube-linter lint "$dir" --format plain || true
jq '.summary' /tmp/kubeconform.json
