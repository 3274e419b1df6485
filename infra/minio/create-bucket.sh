#!/bin/sh
# MinIO bucket-creation job for infra/docker-compose.yml: waits for the server, then creates the bucket
# (idempotent: --ignore-existing). Runs in the minio/mc image, whose shell is POSIX sh.
set -eu

: "${MINIO_ENDPOINT:=http://minio:9000}"
: "${TIERLOG_BUCKET:=tierlog}"

tries=0
until mc alias set tierlog "$MINIO_ENDPOINT" "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "MinIO at $MINIO_ENDPOINT did not come up" >&2
        exit 1
    fi
    sleep 1
done
mc mb --ignore-existing "tierlog/$TIERLOG_BUCKET"
echo "bucket $TIERLOG_BUCKET ready"
