"""Suite-wide test settings.

S3 clients in any test must never probe the EC2 metadata address or pick up a developer's real
credentials, so these are set for the whole test process before anything imports botocore.
"""

import os

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

# Hypothesis: no per-example deadline (a loaded 2-core machine makes timings meaningless; tests assert no
# timings anyway). In CI the examples are derandomized so a run is reproducible; developers' runs explore.
from hypothesis import settings

settings.register_profile("tierlog", deadline=None, print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("tierlog"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "tierlog")
