"""Suite-wide test settings, and the fixtures the integration and end-to-end suites share: one real
``moto_server`` process and one local SparkSession per test session.

S3 clients in any test must never probe the EC2 metadata address or pick up a developer's real
credentials, so these are set for the whole test process before anything imports botocore.
"""

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.remote.servers import AWS_TEST_ENV, AWS_UNSET, S3Server, run_moto

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
# Broker processes the tests start serve Kafka's protocol on a free port, not the default 9092: many run at
# once (tests that need a known port pass --kafka-listener).
os.environ.setdefault("TIERLOG_KAFKA_LISTENER", "127.0.0.1:0")

# Hypothesis: no per-example deadline (a loaded 2-core machine makes timings meaningless; tests assert no
# timings anyway). In CI the examples are derandomized so a run is reproducible; developers' runs explore.
from hypothesis import settings

settings.register_profile("tierlog", deadline=None, print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("tierlog"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "tierlog")


@pytest.fixture(scope="session")
def aws_test_env() -> Iterator[None]:
    """Dummy credentials and no stray endpoint/profile for this test process; restored afterwards."""
    saved = {k: os.environ.get(k) for k in (*AWS_TEST_ENV, *AWS_UNSET)}
    for k in AWS_UNSET:
        os.environ.pop(k, None)
    os.environ.update(AWS_TEST_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def moto_server(aws_test_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real ``moto_server`` process on 127.0.0.1 for the whole session; tests make their own buckets."""
    with run_moto(tmp_path_factory.mktemp("moto")) as server:
        yield server


def spark_missing() -> str | None:
    """Why Spark tests cannot run here, or None when the Spark extra (pyspark and pyarrow) is installed."""
    for name in ("pyspark", "pyarrow"):
        try:
            __import__(name)
        except ImportError as err:
            return f"the Spark extra is not installed ({err}); pip install 'tierlog[spark]'"
    return None


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The one SparkSession (``local[2]``) of the test session, with the ``tierlog`` source registered as
    docs/spark.md says: ``spark.dataSource.register(TierlogDataSource)``, the workers running this venv's
    interpreter. Tests asking for it are skipped, with the reason, when the Spark extra is not installed."""
    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from tierlog.spark import TierlogDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .config("spark.sql.pyspark.worker.logging.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TierlogDataSource)
    yield session
    session.stop()
