#!/usr/bin/env bash
# Install LocalStack (S3 only) into its own virtualenv, for running the object-store contract suite against
# it as a host process. tierlog runs on Python 3.11; LocalStack needs >= 3.12, so it gets an interpreter of
# its own, found on PATH or among pyenv's versions. `make test` runs this before the suite.
#
#   localstack/setup-venv.sh [--optional] [python-executable]
#
# Idempotent: a stamp in the venv records the interpreter and the pinned release, so a second run only
# checks the stamp. --optional (what `make test` passes) turns "no Python >= 3.12 here" and a failed install
# into one line on stderr and exit status 0: the LocalStack tests then skip with the reason.
# The test fixture looks for the result at $TIERLOG_LOCALSTACK_VENV (default ~/.cache/tierlog/localstack-venv).
set -euo pipefail

VENV="${TIERLOG_LOCALSTACK_VENV:-$HOME/.cache/tierlog/localstack-venv}"
STAMP="$VENV/.tierlog-stamp"
OPTIONAL=0
if [ "${1:-}" = "--optional" ]; then OPTIONAL=1; shift; fi
PYTHON="${1:-}"

# The release to install for an interpreter's minor version (both run the contract suite on this machine).
# localstack-core 2026.x imports warnings.deprecated (new in 3.13); 4.13.1 is the last release that runs on 3.12.
# cbor2 6 changed APIs the LocalStack runtime uses.
requirements_for() {
    case "$1" in
        3.12) echo "localstack-core[runtime]==4.13.1 cbor2<6" ;;
        *) echo "localstack-core[runtime]==2026.3.0 cbor2<6" ;;
    esac
}

# "3.13" for an interpreter that runs and is >= 3.12, nothing otherwise (pyenv shims of versions that are
# not activated fail to run, so every candidate is run, not only looked up).
minor_version() {
    "$1" -c 'import sys; assert sys.version_info >= (3, 12); print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

give_up() {
    if [ "$OPTIONAL" = 1 ]; then
        echo "localstack: $1; the LocalStack tests will be skipped" >&2
        exit 0
    fi
    echo "localstack: $1" >&2
    exit 1
}

# The venv exists, its interpreter still runs, and it holds what this script pins for it.
up_to_date() {
    [ -f "$STAMP" ] || return 1
    local have
    have="$(minor_version "$VENV/bin/python")"
    [ -n "$have" ] && [ "$(cat "$STAMP")" = "$have $(requirements_for "$have")" ]
}

if [ -z "$PYTHON" ] && up_to_date; then exit 0; fi
# One installer at a time (two `make test` runs on a fresh machine); the second finds the first's result.
mkdir -p "$(dirname "$VENV")"
exec 9> "$VENV.lock"
flock 9
if [ -z "$PYTHON" ] && up_to_date; then exit 0; fi

# Look for an interpreter: 3.13 first (what current LocalStack releases target), then newer, then 3.12; for
# each, the one on PATH, then pyenv's (highest patch release first).
if [ -z "$PYTHON" ]; then
    pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for minor in 13 14 15 16 17 18 19 12; do
        candidates=()
        if found="$(command -v "python3.$minor")"; then candidates+=("$found"); fi
        while IFS= read -r path; do
            candidates+=("$path")
        done < <(printf '%s\n' "$pyenv_root"/versions/3."$minor".*/bin/python3 | sort -rV)
        for candidate in "${candidates[@]}"; do
            if [ "$(minor_version "$candidate")" = "3.$minor" ]; then PYTHON="$candidate"; break 2; fi
        done
    done
    [ -n "$PYTHON" ] || give_up "no Python >= 3.12 on PATH or in $pyenv_root/versions"
fi
minor="$(minor_version "$PYTHON")"
[ -n "$minor" ] || give_up "$PYTHON does not run or is older than 3.12"
read -r -a requirements <<< "$(requirements_for "$minor")"

echo "localstack: installing ${requirements[*]} with $PYTHON ($minor) into $VENV" >&2
rm -f "$STAMP"
"$PYTHON" -m venv --clear "$VENV" || give_up "could not create a venv with $PYTHON"
log="$VENV/install.log"
if ! timeout 900 "$VENV/bin/python" -m pip install --disable-pip-version-check "${requirements[@]}" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    give_up "installing ${requirements[*]} failed (log: $log)"
fi
"$VENV/bin/python" -c 'import localstack.aws.components, cbor2' \
    || give_up "LocalStack installed but does not import with $PYTHON"
echo "$minor ${requirements[*]}" > "$STAMP"
echo "localstack: installed in $VENV; the integration suite will use it" >&2
