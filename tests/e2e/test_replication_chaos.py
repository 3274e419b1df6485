"""Replication under real failures: one etcd and three ``tierlog serve`` brokers, RF=3 topics with
``min.insync.replicas=2``, records produced with ``acks=all`` while brokers are killed with SIGKILL or
paused with SIGSTOP (docs/design/0010-replication.md, issue 14's proof).

What is checked is what design 0010 promises:

* every acknowledged record is read back at exactly its acknowledged offset, from the last leader, in a
  batch stamped with the leader epoch the answer named; no two brokers acknowledged writes in one epoch;
* once every replica is in the ISR and HW = LEO on each, the replicas hold the same batches, byte for byte
  (compared as the concatenated batches of each replica's ``.log`` files in base-offset order, with the
  brokers stopped: replicas roll segments independently, so file boundaries may differ);
* with tiering to a real S3 server (moto_server), the same, plus ``tierlog tiering check`` finds no
  leaked or missing object and the records below the local log start come from the remote tier;
* a paused follower leaves the ISR after ``replica.lag.time.max.ms`` (its etcd session intact) while
  acks=all produce goes on, and rejoins once resumed; with two of three brokers dead an acks=all produce is
  refused with 50313 (NOT_ENOUGH_REPLICAS) and appends nothing, while acks=1 still appends;
* a leader paused past its session and resumed after a failover acknowledges nothing that is then lost
  (requests sent into its socket while it was paused included), and rejoins as a follower.

Every wait polls a condition against a deadline; nothing asserts a timing. The time from each leader kill
to the first acknowledged produce on the new leader is printed (``-s``) for the docs.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.process import run_cli
from tests.e2e.replication_harness import (
    BATCHES,
    FAILOVER_DEADLINE_S,
    Ack,
    Answer,
    ProduceLoop,
    ReplicatedCluster,
    epoch_entries,
    error_code,
    first_stamped,
    partition_batches,
    partition_end,
    produce,
    read_all,
    wait_for,
)
from tests.integration.cluster.etcd import EtcdServer
from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "chaos"
REPLICATED = {"min.insync.replicas": "2"}
TIERED = {
    **REPLICATED,
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "0",  # keep no uploaded segment on local disk
    "retention.ms": "-1",
}
REMOTE_PREFIX = "chaos"
PATIENT_SESSION_MS = 30_000


def start_cluster(root: Path, extra_args: tuple[str, ...] = ()) -> Iterator[ReplicatedCluster]:
    etcd = EtcdServer(root / "etcd")
    etcd.start()
    running = ReplicatedCluster(etcd, root, extra_args=extra_args)
    try:
        for broker_id in (1, 2, 3):
            running.start(broker_id)
        yield running
    finally:
        for process in running.brokers.values():
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)  # a paused broker must be able to die
            process.kill()
        etcd.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    yield from start_cluster(tmp_path)


@pytest.fixture
def patient_cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    """Brokers whose etcd session outlasts any pause a test makes (30 s): a paused follower can leave the
    ISR only because it stopped fetching (``replica.lag.time.max.ms``), never because its lease expired."""
    yield from start_cluster(tmp_path, ("--broker-session-timeout-ms", str(PATIENT_SESSION_MS)))


@pytest.fixture
def slow_catch_up_cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    """Brokers whose followers fetch at most 512 bytes per request, so an emptied replica needs many
    fetches to catch up (a window in which it must not be elected)."""
    yield from start_cluster(tmp_path, ("--replica-fetch-max-bytes", "512"))


@pytest.fixture
def fresh_bucket(moto_server: S3Server) -> str:
    """A bucket of its own for each test on the session's moto_server (``tierlog tiering check`` then
    sees one test's objects only)."""
    return asyncio.run(create_bucket(moto_server))


@pytest.fixture
def tiered_cluster(tmp_path: Path, moto_server: S3Server, fresh_bucket: str) -> Iterator[ReplicatedCluster]:
    args = (
        "--remote-uri", f"s3://{fresh_bucket}/{REMOTE_PREFIX}",
        "--s3-endpoint-url", moto_server.endpoint_url,
        "--remote-upload-interval-ms", "100",
        "--remote-max-upload-interval-ms", "300",
        "--log-retention-check-interval-ms", "200",
    )  # fmt: skip
    yield from start_cluster(tmp_path, args)


def tail(cluster: ReplicatedCluster, chars: int = 6000) -> str:
    return cluster.all_logs()[-chars:]


def leader_of(cluster: ReplicatedCluster, partition: int = 0, via: int | None = None) -> int:
    return int(cluster.partitions(TOPIC, via)[partition]["leader"])


def wait_progress(loop: ProduceLoop, since: float, partition: int, count: int = 3) -> None:
    """Wait until ``count`` produces to ``partition`` were acknowledged after ``since``."""
    wait_for(
        f"{count} acknowledged produces to partition {partition}",
        lambda: sum(1 for a in list(loop.acks) if a.at > since and a.partition == partition) >= count,
        FAILOVER_DEADLINE_S,
    )


def kill_leaders(
    cluster: ReplicatedCluster, loop: ProduceLoop, kills: int, *, settle: bool = True
) -> list[float]:
    """``kills`` rounds of: full ISR (with ``settle``; else only in the first round, so the broker
    restarted in the previous round may still be catching up) and produce progress, SIGKILL of partition
    0's leader, the first acknowledged produce through another broker, restart of the killed one. Answers
    the kill-to-first-ack times (printed, never asserted)."""
    times: list[float] = []
    for round_ in range(kills):
        if settle or round_ == 0:
            wait_for(
                "every replica back in the ISR", lambda: cluster.settled(TOPIC, len(loop.partitions)),
                FAILOVER_DEADLINE_S,
            )  # fmt: skip
        wait_progress(loop, time.monotonic(), 0)
        victim = leader_of(cluster)
        killed_at = time.monotonic()
        cluster.brokers[victim].kill()
        first = wait_for(
            f"an acknowledged produce after broker {victim} was killed",
            lambda: loop.acked_since(killed_at, 0, not_by=victim),  # noqa: B023 (called in this round)
            FAILOVER_DEADLINE_S,
        )
        times.append(first.at - killed_at)
        print(
            f"\nround {round_ + 1}: leader {victim} killed; first acks=all produce acknowledged by broker "
            f"{first.sent_to} (leader epoch {first.leader_epoch}) after {first.at - killed_at:.2f} s"
        )
        cluster.start(victim)
    wait_for(
        "every replica back in the ISR", lambda: cluster.settled(TOPIC, len(loop.partitions)),
        FAILOVER_DEADLINE_S,
    )  # fmt: skip
    wait_progress(loop, time.monotonic(), 0)
    return times


def check_acks(acks: list[Ack]) -> None:
    """Every answer names its epoch and broker (the one asked), no two brokers acknowledged in one epoch,
    and no offset was acknowledged twice."""
    assert acks, "nothing was acknowledged"
    by_epoch: dict[tuple[int, int | None], set[int | None]] = {}
    offsets: set[tuple[int, int]] = set()
    for ack in acks:
        assert ack.leader_epoch is not None and ack.broker_id is not None, ("answer lacks them", ack)
        assert ack.broker_id == ack.sent_to, ack
        by_epoch.setdefault((ack.partition, ack.leader_epoch), set()).add(ack.broker_id)
        for offset, _ in ack.records():
            assert (ack.partition, offset) not in offsets, ("offset acknowledged twice", ack)
            offsets.add((ack.partition, offset))
    shared = {k: v for k, v in by_epoch.items() if len(v) > 1}
    assert not shared, f"two brokers acknowledged writes in one leader epoch: {shared}"


def check_readable(cluster: ReplicatedCluster, acks: list[Ack], partitions: int) -> dict[int, int]:
    """Every acknowledged record is read from the current leader at its offset, in a batch of the epoch
    its answer named. Answers each partition's leader."""
    leaders: dict[int, int] = {}
    for p in range(partitions):
        leaders[p] = leader_of(cluster, p)
        log = {offset: (value, epoch) for offset, value, epoch in read_all(cluster.url(leaders[p]), TOPIC, p)}
        for ack in (a for a in acks if a.partition == p):
            for offset, value in ack.records():
                assert log.get(offset) == (value, ack.leader_epoch), (
                    f"acknowledged {value!r} at {p}/{offset} in epoch {ack.leader_epoch} by broker "
                    f"{ack.broker_id}; the log has {log.get(offset)}"
                )
    return leaders


def wait_in_step(cluster: ReplicatedCluster, partitions: int) -> None:
    for p in range(partitions):
        try:
            wait_for(
                f"partition {p}: every replica in the ISR, HW = LEO on each",
                lambda p=p: cluster.in_step(TOPIC, p),  # type: ignore[misc]
                FAILOVER_DEADLINE_S,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}\n{cluster.report(TOPIC)}") from None


def verify_after(cluster: ReplicatedCluster, acks: list[Ack], partitions: int) -> None:
    """The checks every chaos run ends with: the answers are consistent, every acknowledged record is read
    back at its offset once the replicas are in step, every broker stops cleanly, and the replicas hold
    the same batches."""
    check_acks(acks)
    wait_in_step(cluster, partitions)
    check_readable(cluster, acks, partitions)
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), (codes, tail(cluster))
    compare_replicas(cluster, partitions, whole=True)


def compare_replicas(cluster: ReplicatedCluster, partitions: int, *, whole: bool) -> None:
    """With the brokers stopped: the replicas' batches are the same bytes. ``whole``: every replica holds
    every batch (the concatenations are equal); else (tiering removed local segments at different times, a
    replica may hold none) every replica's log ends at the same offset and any batch two replicas hold is
    the same bytes in both."""
    for p in range(partitions):
        held = {n: partition_batches(cluster.data_dir(n), TOPIC, p) for n in cluster.brokers}
        if whole:
            joined = {n: b"".join(b[k] for k in sorted(b)) for n, b in held.items()}
            sizes = {n: (len(b), len(held[n])) for n, b in joined.items()}
            assert len(set(joined.values())) == 1, f"partition {p}: replicas differ (bytes, batches): {sizes}"
            check_epoch_files(cluster, p, held)
            continue
        ends = {n: partition_end(cluster.data_dir(n), TOPIC, p) for n in cluster.brokers}
        assert len(set(ends.values())) == 1, f"partition {p}: log ends differ: {ends}"
        bases = set().union(*(set(b) for b in held.values()))
        for base in sorted(bases):
            copies = {b[base] for b in held.values() if base in b}
            assert len(copies) == 1, f"partition {p}: batch {base} differs between replicas"


def check_epoch_files(cluster: ReplicatedCluster, partition: int, held: dict[int, dict[int, bytes]]) -> None:
    """Each replica's ``leader-epoch-checkpoint`` starts every epoch its batches are stamped with at the
    first batch so stamped (a leader may also list an epoch in which it appended nothing), in order."""
    for n, batches in held.items():
        entries = epoch_entries(cluster.data_dir(n), TOPIC, partition)
        assert entries == sorted(entries) and len({e for e, _ in entries}) == len(entries), (n, entries)
        listed = dict(entries)
        for epoch, base in first_stamped(batches).items():
            assert listed.get(epoch) == base, (
                f"broker {n}, partition {partition}: epoch {epoch} first stamped at {base}, "
                f"its leader-epoch-checkpoint says {entries}"
            )


def test_acknowledged_records_survive_repeated_leader_kills(cluster: ReplicatedCluster) -> None:
    partitions = 2
    cluster.create_topic(TOPIC, partitions, 3, REPLICATED)
    loop = ProduceLoop(cluster, TOPIC, range(partitions), tag="kill")
    loop.start()
    try:
        times = kill_leaders(cluster, loop, kills=3)
    finally:
        loop.stop()
    print(f"\nkill -> first acks=all produce on the new leader: {', '.join(f'{t:.2f} s' for t in times)}")
    print(f"acknowledged {len(loop.acks)} produces; refusals by error code: {loop.refusals}")
    verify_after(cluster, loop.acks, partitions)


def test_leader_kills_while_the_last_victim_is_still_catching_up_lose_nothing(
    slow_catch_up_cluster: ReplicatedCluster,
) -> None:
    """Leader kills that do not wait for the broker killed before to rejoin the ISR: the next leader is
    elected from the ISR while that one still truncates and catches up across several leader epochs
    (KIP-279); acks=all is refused (50313) while the ISR is the new leader alone."""
    cluster = slow_catch_up_cluster
    cluster.create_topic(TOPIC, 1, 3, REPLICATED)
    loop = ProduceLoop(cluster, TOPIC, [0], tag="hurry", per_batch=20)
    loop.start()
    try:
        kill_leaders(cluster, loop, kills=3, settle=False)
    finally:
        loop.stop()
    print(f"\nacknowledged {len(loop.acks)} produces; refusals by error code: {loop.refusals}")
    verify_after(cluster, loop.acks, 1)


def test_tiered_replicas_survive_leader_kills_and_leave_a_clean_bucket(
    tiered_cluster: ReplicatedCluster, moto_server: S3Server, fresh_bucket: str
) -> None:
    cluster = tiered_cluster
    cluster.create_topic(TOPIC, 1, 3, TIERED)
    loop = ProduceLoop(cluster, TOPIC, [0], tag="tier", per_batch=10)
    loop.start()
    try:
        times = kill_leaders(cluster, loop, kills=2)
    finally:
        loop.stop()
    print(
        "\ntiered: kill -> first acks=all produce on the new leader: "
        + ", ".join(f"{t:.2f} s" for t in times)
    )
    check_acks(loop.acks)
    wait_in_step(cluster, 1)
    leader = leader_of(cluster)

    def local_start() -> int | None:  # the leader's first local batch, once tiering deleted some segments
        batches = [b for b in (cluster.data_dir(leader) / f"{TOPIC}-0").glob("*.log")]
        first = min((int(b.name.split(".")[0]) for b in batches), default=0)
        return first if first > 0 else None

    first_local = wait_for(
        "segments uploaded and deleted locally on the leader", local_start, FAILOVER_DEADLINE_S
    )
    assert any(a.base_offset < first_local for a in loop.acks), "no acknowledged record below the local start"
    check_readable(cluster, loop.acks, 1)  # the records below first_local come from the bucket
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), (codes, tail(cluster))
    compare_replicas(cluster, 1, whole=False)
    check_bucket(moto_server, fresh_bucket)


def test_paused_follower_leaves_the_isr_and_rejoins(patient_cluster: ReplicatedCluster) -> None:
    cluster = patient_cluster
    cluster.create_topic(TOPIC, 1, 3, REPLICATED)
    leader = leader_of(cluster)
    controller = wait_for("a controller", cluster.controller)[0]
    followers = [n for n in cluster.brokers if n != leader]
    victim = next((n for n in followers if n != controller), followers[0])
    loop = ProduceLoop(cluster, TOPIC, [0], tag="pause")
    loop.start()
    try:
        wait_progress(loop, time.monotonic(), 0)
        paused = cluster.brokers[victim]
        paused.proc.send_signal(signal.SIGSTOP)
        cluster.paused.add(victim)
        try:

            def shrunk() -> bool:
                state = cluster.partitions(TOPIC, leader).get(0)
                return state is not None and victim not in state["isr"] and leader in state["isr"]

            wait_for(f"paused broker {victim} out of the ISR", shrunk, FAILOVER_DEADLINE_S)
            shrunk_at = time.monotonic()
            # Out by lag, not by a lost session: it is still a registered broker.
            registered = [b["broker_id"] for b in (cluster.metadata(leader) or {}).get("brokers", [])]
            assert victim in registered, (victim, registered)
            wait_progress(loop, shrunk_at, 0)  # acks=all goes on with the two others
            assert all(a.sent_to != victim for a in loop.acks)
        finally:
            paused.proc.send_signal(signal.SIGCONT)
            cluster.paused.discard(victim)
        wait_for(
            f"resumed broker {victim} back in the ISR", lambda: cluster.settled(TOPIC, 1), FAILOVER_DEADLINE_S
        )
        wait_progress(loop, time.monotonic(), 0)
    finally:
        loop.stop()
    print(f"\nacknowledged {len(loop.acks)} produces; refusals by error code: {loop.refusals}")
    check_acks(loop.acks)
    wait_in_step(cluster, 1)
    check_readable(cluster, loop.acks, 1)
    assert paused.proc.poll() is None, paused.log()[-3000:]
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), (codes, tail(cluster))
    compare_replicas(cluster, 1, whole=True)


def test_acks_all_is_refused_without_enough_replicas_and_appends_nothing(cluster: ReplicatedCluster) -> None:
    cluster.create_topic(TOPIC, 1, 3, REPLICATED)
    leader = leader_of(cluster)
    url = cluster.url(leader)
    first = produce(url, TOPIC, 0, [b"with three"], acks="all")
    assert first.status == 200, (first.status, first.body)

    for broker_id in [n for n in cluster.brokers if n != leader]:
        cluster.brokers[broker_id].kill()

    def isr_of_one() -> bool:
        state = cluster.partitions(TOPIC, leader).get(0)
        return state is not None and state["leader"] == leader and state["isr"] == [leader]

    wait_for("the ISR shrunk to the leader alone", isr_of_one, FAILOVER_DEADLINE_S)
    marks = cluster.watermarks(leader, TOPIC)
    assert marks is not None
    end_before = marks[0]["log_end_offset"]

    refused = produce(url, TOPIC, 0, [b"must not land"], acks="all")
    assert refused.status == 503 and error_code(refused) == 50313, (refused.status, refused.body)
    marks = cluster.watermarks(leader, TOPIC)
    assert marks is not None and marks[0]["log_end_offset"] == end_before, (marks, end_before)

    accepted = produce(url, TOPIC, 0, [b"acks one"], acks="1")
    assert accepted.status == 200, (accepted.status, accepted.body)
    assert accepted.json()["base_offset"] == end_before, accepted.body
    values = [value for _, value, _ in read_all(url, TOPIC, 0)]
    assert values == [b"with three", b"acks one"], values


def test_a_paused_leader_resumed_after_a_failover_loses_no_acknowledged_record(
    cluster: ReplicatedCluster,
) -> None:
    """The leader is paused past its session: another replica leads with a higher epoch and takes
    produces. Resumed, the old leader is asked to produce at once, before it can have heard of the new
    epoch: whatever it acknowledges must survive like every other acknowledged record (its followers left
    it, so an acks=all write there can only be refused or time out), and it rejoins as a follower."""
    pause_the_leader(cluster, REPLICATED)
    compare_replicas(cluster, 1, whole=True)


def test_a_paused_tiering_leader_resumed_after_a_failover_leaks_nothing(
    tiered_cluster: ReplicatedCluster, moto_server: S3Server, fresh_bucket: str
) -> None:
    """As above with the topic tiered: the paused leader wakes up with uploads due (its idle segment
    rolled, its manifest older than the new leader's); it must not leave objects no manifest references,
    nor lose a record the new leader's manifest covers."""
    pause_the_leader(tiered_cluster, TIERED, per_batch=10)
    compare_replicas(tiered_cluster, 1, whole=False)
    check_bucket(moto_server, fresh_bucket)


def check_bucket(moto_server: S3Server, bucket: str) -> None:
    """``tierlog tiering check`` (brokers stopped) finds no leaked and no missing object."""
    checked = run_cli(
        "tiering", "check", "--json",
        "--remote-uri", f"s3://{bucket}/{REMOTE_PREFIX}",
        "--s3-endpoint-url", moto_server.endpoint_url,
    )  # fmt: skip
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    report = json.loads(checked.stdout)
    assert report["clean"] and not report["leaks"] and not report["missing"], report
    assert report["referenced"] > 0, report


def pause_the_leader(cluster: ReplicatedCluster, configs: dict[str, str], per_batch: int = 5) -> None:
    """The paused-leader scenario up to the brokers' clean stop (the callers compare what they hold)."""
    cluster.create_topic(TOPIC, 1, 3, configs)
    before = cluster.partitions(TOPIC)[0]
    old = int(before["leader"])
    loop = ProduceLoop(cluster, TOPIC, [0], tag="zombie", per_batch=per_batch)
    loop.start()
    zombie_answers: list[tuple[int, int | None]] = []

    def send_to_zombie(n: int) -> tuple[http.client.HTTPConnection, bytes]:
        """Send (not yet answered) one acks=all produce of ``zombie-<n>`` to the old leader."""
        value = f"zombie-{n}".encode()
        connection = http.client.HTTPConnection("127.0.0.1", cluster.ports[old], timeout=FAILOVER_DEADLINE_S)
        path = f"/native/v1/topics/{TOPIC}/partitions/0/batches?acks=all&timeout_ms=2000"
        body = build_batch([Record(key=None, value=value)])
        connection.request("POST", path, body, {"Content-Type": BATCHES})
        return connection, value

    def answer_of(connection: http.client.HTTPConnection, value: bytes) -> int | None:
        """The old leader's answer to a sent produce; an acknowledgement joins the loop's. Its error code."""
        try:
            response = connection.getresponse()
            answer = Answer(response.status, response.read(), dict(response.headers))
        except OSError:
            zombie_answers.append((0, None))
            return None
        finally:
            connection.close()
        code = error_code(answer)
        zombie_answers.append((answer.status, code))
        if answer.status == 200:
            doc = answer.json()
            loop.acks.append(
                Ack(0, int(doc["base_offset"]), (value,), doc.get("leader_epoch"), doc.get("broker_id"), old,
                    time.monotonic())
            )  # fmt: skip
        return code

    queued: list[tuple[http.client.HTTPConnection, bytes]] = []
    try:
        wait_progress(loop, time.monotonic(), 0)
        paused = cluster.brokers[old]
        paused.proc.send_signal(signal.SIGSTOP)
        cluster.paused.add(old)
        try:

            def replaced() -> bool:
                state = cluster.partitions(TOPIC).get(0)
                return state is not None and state["leader"] not in (old, -1)

            wait_for(f"a new leader instead of paused broker {old}", replaced, FAILOVER_DEADLINE_S)
            wait_progress(loop, time.monotonic(), 0)
            # Requests sent into the paused broker's socket: it reads them as it wakes up, racing whatever
            # its metadata watch has queued meanwhile.
            queued = [send_to_zombie(n) for n in range(4)]
        finally:
            paused.proc.send_signal(signal.SIGCONT)
        for connection, value in queued:
            answer_of(connection, value)
        deadline = time.monotonic() + FAILOVER_DEADLINE_S
        for n in range(4, 1000):  # then ask it again until it says it does not lead
            if answer_of(*send_to_zombie(n)) == 50310 or time.monotonic() > deadline:
                break
        cluster.paused.discard(old)
        wait_for(f"broker {old} back in the ISR", lambda: cluster.settled(TOPIC, 1), FAILOVER_DEADLINE_S)
        wait_progress(loop, time.monotonic(), 0)
    finally:
        loop.stop()
    print(f"\nthe resumed old leader answered: {zombie_answers}")
    assert any(code == 50310 for _, code in zombie_answers), zombie_answers
    check_acks(loop.acks)
    wait_in_step(cluster, 1)
    check_readable(cluster, loop.acks, 1)
    codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), (codes, tail(cluster))


def test_leader_and_a_follower_killed_at_once_lose_no_acknowledged_record(cluster: ReplicatedCluster) -> None:
    """The leader and one follower die together: the survivor (in the ISR) leads alone, so acks=all is
    refused with 50313 meanwhile; both come back, truncate what they had beyond the survivor's log
    (KIP-101) and rejoin. Every acknowledged record survives and the replicas end byte-identical."""
    cluster.create_topic(TOPIC, 1, 3, REPLICATED)
    state = cluster.partitions(TOPIC)[0]
    leader = int(state["leader"])
    follower = next(n for n in state["replicas"] if n != leader)
    survivor = next(n for n in state["replicas"] if n not in (leader, follower))
    loop = ProduceLoop(cluster, TOPIC, [0], tag="double")
    loop.start()
    try:
        wait_progress(loop, time.monotonic(), 0)
        cluster.brokers[leader].kill()
        cluster.brokers[follower].kill()

        def alone() -> bool:
            now = cluster.partitions(TOPIC, survivor).get(0)
            return now is not None and now["leader"] == survivor and now["isr"] == [survivor]

        wait_for(f"broker {survivor} leading alone", alone, FAILOVER_DEADLINE_S)
        refused_before = loop.refusals.get(50313, 0)
        wait_for("acks=all refused with 50313", lambda: loop.refusals.get(50313, 0) > refused_before)
        cluster.start(leader)
        cluster.start(follower)
        wait_for("every replica back in the ISR", lambda: cluster.settled(TOPIC, 1), FAILOVER_DEADLINE_S)
        wait_progress(loop, time.monotonic(), 0)
    finally:
        loop.stop()
    print(f"\nacknowledged {len(loop.acks)} produces; refusals by error code: {loop.refusals}")
    verify_after(cluster, loop.acks, 1)


def test_a_follower_back_with_an_empty_disk_is_not_elected_over_a_full_replica(
    slow_catch_up_cluster: ReplicatedCluster,
) -> None:
    """A follower is killed, its data directory deleted, and it is started again at once; then the leader
    is killed. acks=all records are on the leader and the other follower only, so electing the emptied
    broker would lose them: every acknowledged record must survive whichever broker leads."""
    cluster = slow_catch_up_cluster
    cluster.create_topic(TOPIC, 1, 3, REPLICATED)
    state = cluster.partitions(TOPIC)[0]
    leader = int(state["leader"])
    emptied = next(n for n in state["replicas"] if n != leader)
    loop = ProduceLoop(cluster, TOPIC, [0], tag="disk", per_batch=20)
    loop.start()
    try:
        wait_for("some 2000 records acknowledged", lambda: len(loop.acks) >= 100, FAILOVER_DEADLINE_S)
        cluster.brokers[emptied].kill()
        shutil.rmtree(cluster.data_dir(emptied))
        cluster.start(emptied)
        cluster.brokers[leader].kill()

        def new_leader() -> int | None:
            now = cluster.partitions(TOPIC).get(0)
            return int(now["leader"]) if now is not None and now["leader"] not in (leader, -1) else None

        elected = wait_for(f"a leader after broker {leader}", new_leader, FAILOVER_DEADLINE_S)
        print(f"\nbroker {emptied} restarted empty; broker {elected} elected after broker {leader}")
        cluster.start(leader)
        wait_for("every replica back in the ISR", lambda: cluster.settled(TOPIC, 1), FAILOVER_DEADLINE_S)
        wait_progress(loop, time.monotonic(), 0)
    finally:
        loop.stop()
    verify_after(cluster, loop.acks, 1)
