#!/usr/bin/env bash
# Checks the PrometheusRule's groups with `promtool check rules` and runs their unit tests
# (manifests/prometheus/prometheus_rule_test.yaml) with `promtool test rules`.
# promtool comes from Debian's prometheus package, installed here when missing (CI runs as root
# on a fresh machine). PYTHON overrides the interpreter used to extract the rule groups (it
# needs PyYAML); by default the project venv through uv.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rule="$root/manifests/prometheus/prometheus_rule.yaml"
tests="$root/manifests/prometheus/prometheus_rule_test.yaml"

if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "promtool not found: installing Debian's prometheus package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "promtool not found, and apt-get (as root) is not available to install it" >&2
    exit 3
  fi
fi

if [ -n "${PYTHON:-}" ]; then
  python=("$PYTHON")
else
  python=(uv run --frozen --project "$root" python)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"${python[@]}" - "$rule" "$work/computedomain.rules.yaml" <<'PY'
import sys

import yaml

with open(sys.argv[1]) as source:
    document = yaml.safe_load(source)
if document.get("kind") != "PrometheusRule":
    sys.exit(f"{sys.argv[1]}: expected a PrometheusRule, got {document.get('kind')!r}")
with open(sys.argv[2], "w") as target:
    yaml.safe_dump({"groups": document["spec"]["groups"]}, target, sort_keys=False)
PY
cp "$tests" "$work/tests.yaml"

promtool check rules "$work/computedomain.rules.yaml"
(cd "$work" && promtool test rules tests.yaml)
