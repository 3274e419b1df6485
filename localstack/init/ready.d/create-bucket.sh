#!/usr/bin/env bash
# LocalStack "ready" hook: create the tierlog bucket once S3 is up. LocalStack runs every executable
# script in /etc/localstack/init/ready.d when the gateway is ready; mount this folder there.
set -euo pipefail

BUCKET="${TIERLOG_BUCKET:-tierlog}"
REGION="${AWS_DEFAULT_REGION:-us-east-1}"

# Creating an existing bucket is not an error here: the hook may run again on a restart with persistence.
if awslocal s3api head-bucket --bucket "$BUCKET" >/dev/null 2>&1; then
    echo "tierlog: bucket $BUCKET already exists"
else
    if [ "$REGION" = "us-east-1" ]; then
        awslocal s3api create-bucket --bucket "$BUCKET"
    else
        awslocal s3api create-bucket --bucket "$BUCKET" \
            --create-bucket-configuration "LocationConstraint=$REGION"
    fi
    echo "tierlog: created bucket $BUCKET"
fi
