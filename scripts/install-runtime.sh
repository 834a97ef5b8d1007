#!/usr/bin/env bash
# Install the worker's runtime dependencies exactly as uv.lock pins them (never
# re-resolved), then its wheel, into a virtualenv. The Dockerfile's build stage runs exactly this script, and
# tests/deploy/test_install_script.py runs it into a temporary venv, so CI exercises the same
# install steps as the image without needing a Docker engine.
#
# Usage: scripts/install-runtime.sh VENV_DIR [SOURCE_DIR]
#   VENV_DIR    created with $PYTHON (default python3) unless it already holds a venv
#   SOURCE_DIR  the project root (default: this script's parent directory)
# uv is $UV when set, else the version uv.lock pins, installed from PyPI for the run.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 VENV_DIR [SOURCE_DIR]" >&2
    exit 2
fi
venv=$1
src=${2:-"$(cd "$(dirname "$0")/.." && pwd)"}
python=${PYTHON:-python3}

# The files that make up the wheel. Building from a copy keeps setuptools' build/ and
# *.egg-info out of the work tree (where other builds and tests may run at the same time).
sources=(pyproject.toml uv.lock README.md worker schemas)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for item in "${sources[@]}"; do
    if [ ! -e "$src/$item" ]; then
        echo "$0: $src/$item is missing; the wheel cannot be built without it" >&2
        exit 1
    fi
    cp -R "$src/$item" "$stage/"
done
find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 UV_PYTHON_DOWNLOADS=never
# uv trusts its own bundled roots unless told otherwise: the system's bundle, as pip
# trusts it (an egress proxy's CA lives there where there is one).
if [ -z "${SSL_CERT_FILE:-}" ] && [ -r /etc/ssl/certs/ca-certificates.crt ]; then
    export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
fi

uv=${UV:-}
if [ -z "$uv" ]; then
    locked_uv=$(grep -A1 '^name = "uv"$' "$stage/uv.lock" | sed -n 's/^version = "\(.*\)"$/\1/p')
    "$python" -m venv "$stage/uv"
    "$stage/uv/bin/python" -m pip install --quiet "uv==${locked_uv:?uv is not in uv.lock}"
    uv=$stage/uv/bin/uv
fi
# The runtime dependencies with the `tokenizers` extra (exact budgets, cl100k_base, work
# in the image too) and the `otel` extra (OTEL_* variables turn tracing on), as the lock
# pins them; never the test extras.
UV_PROJECT_ENVIRONMENT=$venv "$uv" sync --quiet --frozen --project "$stage" \
    --no-install-project --no-dev --extra tokenizers --extra otel
# Then only our wheel: its dependencies are the ones just installed.
"$venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$stage/dist" "$stage"
wheel=$(echo "$stage"/dist/build_prompt_worker-*.whl)
"$venv/bin/python" -m pip install --quiet --no-deps "$wheel"

"$venv/bin/prompt-worker" --version
