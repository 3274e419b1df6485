#!/bin/sh
# Installs kafkajs (the version package-lock.json pins) into infra/kafkajs/node_modules, for the test that
# runs docs/kafka-protocol.md's kafkajs example. Needs node and npm: Debian's nodejs and npm packages are
# installed with apt-get when this runs as root. Idempotent (instant once installed); never fails the build:
# without node or kafkajs it says so in one line and that test skips.
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$here/node_modules/kafkajs/package.json" ] && exit 0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq nodejs npm >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq nodejs npm >/dev/null 2>&1; }; } \
      || { echo "kafkajs: apt-get install nodejs npm failed; the kafkajs test will skip" >&2; exit 0; }
  else
    echo "kafkajs: node and npm are not installed (installing them needs root and apt-get); the kafkajs test will skip" >&2
    exit 0
  fi
fi
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) \
  || echo "kafkajs: npm ci in infra/kafkajs failed; the kafkajs test will skip" >&2
exit 0
