#!/bin/sh
# Installs gangq as the image holds it: a wheel built from the source tree SOURCE, installed with
# its dependencies resolved and no extras into a new virtualenv VENV, by the `python` on PATH.
# deploy/Containerfile runs it in its build stage and tests/deploy/test_deploy_image.py runs it on
# the host, so what the tests start is what the image would.
#   usage: sh deploy/install.sh SOURCE VENV
set -eu
source_tree=$1
target=$2
wheels=$(mktemp -d)
python -m pip wheel --no-deps --wheel-dir "$wheels" "$source_tree"
python -m venv "$target"
"$target/bin/python" -m pip install "$wheels"/gangq-*.whl
rm -rf "$wheels"
