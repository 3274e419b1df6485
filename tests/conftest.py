"""Suite-wide test settings.

S3 clients in any test must never probe the EC2 metadata address or pick up a developer's real
credentials, so these are set for the whole test process before anything imports botocore.
"""

import os

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
