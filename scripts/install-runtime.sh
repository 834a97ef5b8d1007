#!/usr/bin/env bash
# Build the worker's wheel and install it, with its runtime dependencies only, into a
# virtualenv. The Dockerfile's build stage runs exactly this script, and
# tests/deploy/test_install_script.py runs it into a temporary venv, so CI exercises the same
# install steps as the image without needing a Docker engine.
#
# Usage: scripts/install-runtime.sh VENV_DIR [SOURCE_DIR]
#   VENV_DIR    created with $PYTHON (default python3) unless it already holds a venv
#   SOURCE_DIR  the project root (default: this script's parent directory)
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
sources=(pyproject.toml README.md worker schemas)

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
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# --no-deps: only our wheel is built here; its dependencies come from the index in the
# install step below, as released wheels, never the test extras.
"$venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$stage/dist" "$stage"
# With the `tokenizers` extra: exact budgets (cl100k_base) work in the image too.
wheel=$(echo "$stage"/dist/build_prompt_worker-*.whl)
"$venv/bin/python" -m pip install --quiet "${wheel}[tokenizers]"

"$venv/bin/prompt-worker" --version
