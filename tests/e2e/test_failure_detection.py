"""Failover without waiting out the broker session (issue 34): one etcd, three ``tierlog serve`` brokers whose
session (``broker.session.timeout.ms``) is long, an RF=3 topic with ``min.insync.replicas=2`` and the
Python client producing with ``acks=all``.

* ``kill -9`` of the partition's leader: its followers' replica fetches are refused, a survivor's failure
  detector confirms the refusal and revokes the dead broker's lease (its log says so), the controller moves
  the partition, and the client's next record is acknowledged by the new leader;
* ``SIGSTOP`` of the leader: its followers' fetches go unanswered, a survivor confirms through etcd that
  its lease is no longer renewed and fences it; the client abandons the request the paused leader holds and
  re-routes, so a record sent after the pause is acknowledged by the new leader, not after the pause.

The session is long enough (15 s) that only the detector can explain a failover before it: the test checks
the fence in the survivors' logs, the records acknowledged, and prints each kill's time from the signal to
the next acknowledged record (the distribution for docs/cluster.md). Nothing asserts a timing; every wait
has a deadline well past the session.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.replication_harness import ReplicatedCluster, wait_for
from tests.e2e.test_cluster_processes import free_port
from tests.integration.cluster.etcd import EtcdServer
from tierlog.client.sync_producer import Producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "failfast"
SESSION_MS = 15_000
DEADLINE_S = 3 * SESSION_MS / 1000 + 20  # to give up at: several sessions on a loaded machine
KILLS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedCluster]:
    root: Path = tmp_path_factory.mktemp("failfast")
    etcd = EtcdServer(root / "etcd")
    etcd.start()
    running = ReplicatedCluster(etcd, root, extra_args=("--broker-session-timeout-ms", str(SESSION_MS)))
    try:
        for broker_id in (1, 2, 3):  # ports and directories first: start() then only spawns and waits
            running.ports.setdefault(broker_id, free_port())
        with ThreadPoolExecutor(3) as pool:  # the three start side by side (each waits for its READY line)
            list(pool.map(running.start, (1, 2, 3)))
        running.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        yield running
    finally:
        for process in running.brokers.values():
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)
            process.kill()
        etcd.stop()


def leader(cluster: ReplicatedCluster) -> int:
    """The partition's leader once every live broker is in its ISR."""
    settled = wait_for("a leader and a full ISR", lambda: cluster.settled(TOPIC, 1), DEADLINE_S)
    return int(settled[0]["leader"])


def fenced_in_logs(cluster: ReplicatedCluster, victim: int, why: str) -> bool:
    needle = f"fences broker {victim} "
    return any(
        needle in line and why in line
        for n, process in cluster.brokers.items()
        if n != victim
        for line in process.log().splitlines()
    )


def acknowledged_after(producer: Producer, value: bytes) -> tuple[float, int]:
    """Send ``value`` and wait for its acknowledgement: (when it came, its offset)."""
    delivered = producer.send(TOPIC, value=value, partition=0).get(DEADLINE_S)
    return time.monotonic(), delivered.offset


def test_a_paused_leader_is_fenced_and_the_client_reroutes(cluster: ReplicatedCluster) -> None:
    urls = [cluster.url(n) for n in sorted(cluster.brokers)]
    with Producer(urls, acks="all", linger_ms=0, delivery_timeout_ms=int(DEADLINE_S * 1000)) as producer:
        acknowledged_after(producer, b"before the pause")
        victim = leader(cluster)
        paused = cluster.brokers[victim]
        paused.proc.send_signal(signal.SIGSTOP)
        cluster.paused.add(victim)
        paused_at = time.monotonic()
        try:
            at, offset = acknowledged_after(producer, b"after the pause")
            # Acknowledged while the old leader is still stopped: the client did not wait for it.
            assert paused.proc.poll() is None and victim in cluster.paused
            new = cluster.partitions(TOPIC, next(iter(cluster.live()))).get(0)
            assert new is not None and new["leader"] != victim, new
            assert fenced_in_logs(cluster, victim, "has not renewed its session"), cluster.all_logs()[-6000:]
        finally:
            paused.proc.send_signal(signal.SIGCONT)
            cluster.paused.discard(victim)
        print(f"\nSIGSTOP of the leader -> next acks=all record acknowledged in {at - paused_at:.2f} s "
              f"(session {SESSION_MS / 1000:.0f} s)")  # fmt: skip
        # Resumed, the old leader finds its lease gone, registers again and rejoins as a follower.
        wait_for("the resumed broker back in the ISR", lambda: cluster.settled(TOPIC, 1), DEADLINE_S)
        later = producer.send(TOPIC, value=b"after the resume", partition=0).get(DEADLINE_S)
        assert later.offset > offset


def test_a_killed_leader_fails_over_before_its_session_expires(cluster: ReplicatedCluster) -> None:
    urls = [cluster.url(n) for n in sorted(cluster.brokers)]
    times: list[float] = []
    with Producer(urls, acks="all", linger_ms=0, delivery_timeout_ms=int(DEADLINE_S * 1000)) as producer:
        acknowledged_after(producer, b"warm-up")
        for round_ in range(KILLS):
            victim = leader(cluster)
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
            at, offset = acknowledged_after(producer, f"after kill {round_}".encode())
            times.append(at - killed_at)
            assert offset >= 0
            new = cluster.partitions(TOPIC).get(0)
            assert new is not None and new["leader"] != victim, new
            assert fenced_in_logs(cluster, victim, "refuses connections"), cluster.all_logs()[-6000:]
            if round_ < KILLS - 1:  # the last victim stays down: no later test needs it
                cluster.start(victim)
    shown = [round(t, 2) for t in times]
    print(f"\nkill -9 of the leader -> next acks=all record acknowledged (s): {shown}, "
          f"median {statistics.median(times):.2f}, session {SESSION_MS / 1000:.0f} s")  # fmt: skip
