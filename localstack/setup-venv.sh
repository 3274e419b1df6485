#!/usr/bin/env bash
# Install LocalStack (S3 only) into its own virtualenv, for running the object-store contract suite against
# it as a host process. Recent localstack-core needs Python >= 3.13 (3.12 for older releases); tierlog
# itself runs on 3.11, so LocalStack gets an interpreter of its own.
#
#   localstack/setup-venv.sh [python-executable]
#
# The test fixture looks for the result at $TIERLOG_LOCALSTACK_VENV (default ~/.cache/tierlog/localstack-venv).
set -euo pipefail

VENV="${TIERLOG_LOCALSTACK_VENV:-$HOME/.cache/tierlog/localstack-venv}"
PYTHON="${1:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.13 python3.14 python3.12; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys' >/dev/null 2>&1; then
            PYTHON="$candidate"
            break
        fi
    done
fi
if [ -z "$PYTHON" ]; then
    echo "LocalStack needs Python >= 3.12 (3.13 for recent releases); none found on PATH" >&2
    exit 1
fi

"$PYTHON" -m venv "$VENV"
# cbor2 6 changed APIs the LocalStack runtime uses.
"$VENV/bin/pip" install --quiet "localstack-core[runtime]" "cbor2<6"
"$VENV/bin/python" -c 'import localstack.aws.components' \
    || { echo "localstack installed but does not import with $PYTHON (try a newer Python)" >&2; exit 1; }
echo "LocalStack installed in $VENV; the integration suite will use it."
