#!/bin/sh
# Installs the gateway and its locked runtime dependencies (no dev tools, not editable) into
# the virtual environment $UV_PROJECT_ENVIRONMENT. Run it in the source directory
# (pyproject.toml, uv.lock, README.md, openapi.yaml, gateway/), with uv on PATH.
#
# Build the environment where it will run: its scripts start with the absolute path of its
# interpreter (#!/opt/gateway/bin/python), so an environment moved after it is built cannot
# start `gateway`. And only with the base image's Python (no download: a downloaded Python
# would stay behind in the build stage).
#
# deploy/Dockerfile runs it; tests/deploy_files.py runs it the same way, in a directory that
# stands in for the image's root.
set -eu
: "${UV_PROJECT_ENVIRONMENT:?set UV_PROJECT_ENVIRONMENT to where the environment will run}"
export UV_PYTHON_DOWNLOADS=never
exec uv sync --frozen --no-dev --no-editable --compile-bytecode
