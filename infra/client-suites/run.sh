#!/usr/bin/env bash
# Run Kafka client libraries' own integration suites against a tierlog broker (issue 30). Not part of
# `make test`: each suite takes minutes. Results and the reasons of failures: docs/kafka-protocol.md.
#
#   infra/client-suites/run.sh kafka-python|aiokafka [SOURCE_DIR] [-- extra pytest arguments]
#
# SOURCE_DIR is a checkout of the library's repository at the tag of the installed version (kafka-python
# 3.0.11's tests for 3.0.12, as 3.0.12 has no tag; aiokafka v0.14.0); without it the tag's tarball is
# downloaded from GitHub. The library under test is the one installed in the venv (.venv by default,
# VENV=... to change). A broker is started from this checkout (`tierlog serve`, data in a temporary
# directory, Kafka listener on a free port) and stopped at the end; each suite's own way of reaching an
# external broker is used (kafka-python: KAFKA_URI; aiokafka has none, so the copy of its
# tests/conftest.py gets fixtures appended that point at the broker instead of a docker container).
set -euo pipefail

suite=${1:?usage: run.sh kafka-python|aiokafka [SOURCE_DIR] [-- pytest args]}
shift
source_dir=""
if [[ $# -gt 0 && $1 != "--" ]]; then source_dir=$1; shift; fi
[[ ${1:-} == "--" ]] && shift

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$root/.venv}
python=$venv/bin/python
work=$(mktemp -d)
trap 'kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

case $suite in
  kafka-python) repo=dpkp/kafka-python; tag=3.0.11; partitions=4 ;;
  aiokafka) repo=aio-libs/aiokafka; tag=v0.14.0; partitions=2 ;;
  *) echo "unknown suite $suite" >&2; exit 2 ;;
esac

mkdir -p "$work/suite"
if [[ -n $source_dir ]]; then
  cp -r "$source_dir/test" "$source_dir/tests" "$source_dir/pyproject.toml" "$work/suite/" 2>/dev/null || true
else
  curl -fsSL "https://codeload.github.com/$repo/tar.gz/refs/tags/$tag" | tar xz -C "$work/suite" --strip-components 1
fi

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PYTHONPATH=$root "$python" -m tierlog serve --data-dir "$work/data" --port 0 \
  --kafka-listener "127.0.0.1:$port" --num-partitions "$partitions" --logging-level WARNING \
  >"$work/broker.log" 2>&1 &
broker_pid=$!
for _ in $(seq 60); do
  if "$python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then break; fi
  sleep 1
done

cd "$work/suite"
status=0
case $suite in
  kafka-python)
    mkdir -p "$work/no-kafka-distribution"  # the fixtures want a Kafka directory even for an external broker
    KAFKA_ROOT=$work/no-kafka-distribution KAFKA_VERSION=4.0.0 KAFKA_URI=PLAINTEXT://127.0.0.1:$port \
      "$python" -m pytest test/integration -p no:cacheprovider -o addopts="" -o log_level=WARNING \
      --timeout 120 -q -rfEs --tb=line "$@" || status=$?
    ;;
  aiokafka)
    # its conftest imports the docker SDK (unused here: no container is started)
    "$python" -c "import docker" 2>/dev/null || "$python" -m pip install -q docker
    cat >>tests/conftest.py <<PYEOF


# ---- appended by tierlog's infra/client-suites/run.sh: a running broker instead of a docker container ----
@pytest.fixture(scope="session")
def docker(request):
    yield None


@pytest.fixture(scope="session")
def kafka_image(request):
    return request.config.getoption("--docker-image")


@pytest.fixture(scope="session")
def ssl_folder():
    return pathlib.Path("tests/ssl_cert")  # not generated: there is no SSL listener here


@pytest.fixture(scope="session")
def kafka_server():
    yield KafkaServer("127.0.0.1", $port, $port, $port, $port, None)


@pytest.fixture(scope="class")
def acl_manager():
    return None


@pytest.fixture(scope="class")
def kafka_config():
    return None


@pytest.fixture(scope="class")
def kerberos_utils():
    return None
PYEOF
    # the image name only tells the suite which Kafka version to expect
    "$python" -m pytest tests -p no:cacheprovider --docker-image tierlog:3.7.0 --no-pull --timeout 120 \
      -o asyncio_default_fixture_loop_scope=function -W ignore::pytest.PytestDeprecationWarning \
      --ignore tests/coordinator/test_assignors.py -q -rfE --tb=line "$@" || status=$?
    ;;
esac
echo "broker log: last lines" >&2
tail -20 "$work/broker.log" >&2
exit $status
