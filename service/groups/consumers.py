"""Consumer instances of the REST Proxy v2 consumer API, living inside the broker.

A REST client creates a named instance in a group, subscribes it (group management: the instance becomes an
auto-rejoining member of the coordinator's group) or assigns it partitions by hand, then polls records,
seeks and commits. The broker keeps each instance's fetch positions.

At-least-once with ``auto.commit.enable``: an automatic commit only ever covers records returned by an
*earlier* poll (the client asking again is its acknowledgement of the previous answer), as Kafka's consumer
commits in ``poll``. Deleting an instance commits everything it returned. An instance idle for longer than
``consumer.instance.timeout.ms`` is deleted by :meth:`ConsumerManager.tick`, without committing.

With security on, a ``topic_pattern`` is resolved here, over the topics the instance's principal may Read
(``ConsumerInstance.may_read``), and the group gets the resolved topics, as Kafka's consumer subscribes to
what its pattern matches in the metadata it may see: a topic the principal may not Describe is never
matched, so its name is never answered. :meth:`ConsumerManager.refresh` resolves again (new topics, changed
ACLs). With security off the coordinator resolves the pattern itself.

Everything here runs on the event loop; partition reads go through the broker, which keeps file I/O off it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tierlog.service.groups.consumer_config import ConsumerSettings
from tierlog.service.groups.coordination import Coordination
from tierlog.service.groups.coordinator import Clock
from tierlog.service.groups.instance import ConsumerInstance, PartitionReader, ReadLike, TopicPartition
from tierlog.service.groups.patterns import NO_TOPIC, compile_pattern, matching_topics
from tierlog.service.groups.reading import check_partition, first_record_at_or_after, log_bounds
from tierlog.service.rest_v2.convert import consumer_records
from tierlog.service.security.model import Principal
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    ConsumerInstanceExistsError,
    ConsumerInstanceNotFoundError,
    IllegalStateError,
    InvalidConsumerConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
)

__all__ = ["ConsumerManager", "ConsumerInstance", "PartitionReader", "ReadLike"]

log = logging.getLogger(__name__)


class ConsumerManager:
    """All REST consumer instances of the broker. Not thread-safe: use from the broker's event loop."""

    def __init__(
        self,
        broker: PartitionReader,
        coordinator: Coordination,
        clock: Clock,
        *,
        instance_timeout_ms: int = 300_000,
        auto_commit_interval_ms: int = 5_000,
    ) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._clock = clock
        self._instance_timeout_ms = instance_timeout_ms
        self._auto_commit_interval_ms = auto_commit_interval_ms
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._counter = 0

    @property
    def reader(self) -> PartitionReader:
        return self._broker

    # -- lifecycle ------------------------------------------------------------------------------------

    def create(
        self,
        group: str,
        name: str | None,
        settings: ConsumerSettings,
        base_url: str,
        *,
        principal: Principal | None = None,
        client_host: str | None = None,
        may_read: Callable[[str], bool] | None = None,
    ) -> ConsumerInstance:
        """Create an instance; an absent name gets a generated one. ``principal`` and ``client_host`` are
        the creating request's; ``may_read(topic)`` tells whether that principal may Read ``topic`` now
        (None, with security off: every topic).

        Raises:
            ConsumerInstanceExistsError: (40902) an instance of that name exists in the group.
            InvalidConsumerConfigError: (42204) a bad name.
        """
        if name is None:
            self._counter += 1
            name = f"rest-consumer-{self._counter}-{self._clock.now_ms()}"
        if not name or len(name) > 255 or any(ord(c) < 33 or c in "/?#%" for c in name):
            raise InvalidConsumerConfigError(f"invalid consumer instance name {name!r}")
        if (group, name) in self._instances:
            raise ConsumerInstanceExistsError(
                f"Consumer with specified consumer ID already exists in the specified consumer group: {name}"
            )
        base_uri = f"{base_url.rstrip('/')}/consumers/{group}/instances/{name}"
        instance = ConsumerInstance(
            group,
            name,
            settings,
            base_uri,
            self._clock.now_ms(),
            principal=principal,
            client_host=client_host,
            may_read=may_read,
        )
        instance.last_auto_commit_ms = instance.last_used_ms
        self._instances[(group, name)] = instance
        return instance

    def get(self, group: str, name: str) -> ConsumerInstance:
        """The instance, marked as used now.

        Raises:
            ConsumerInstanceNotFoundError: (40403) no such instance (never created, deleted, or expired).
        """
        instance = self._instances.get((group, name))
        if instance is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        instance.last_used_ms = self._clock.now_ms()
        return instance

    async def delete(self, group: str, name: str) -> None:
        """Commit what the instance returned (with auto commit), leave the group and forget it.

        Raises:
            ConsumerInstanceNotFoundError: (40403) no such instance.
        """
        instance = self.get(group, name)
        if instance.settings.auto_commit_enable and instance.positions:
            with contextlib.suppress(Exception):
                await self._commit_positions(instance, dict(instance.positions))
        self._drop(instance)

    async def tick(self) -> None:
        """Delete instances idle past the instance timeout (without committing). Idempotent."""
        now = self._clock.now_ms()
        for instance in list(self._instances.values()):
            if now - instance.last_used_ms > self._instance_timeout_ms:
                log.info(
                    "consumer %s/%s expired after %d ms idle",
                    instance.group,
                    instance.name,
                    now - instance.last_used_ms,
                )
                self._drop(instance)

    async def close(self) -> None:
        """On shutdown: commit what auto-commit clients acknowledged, then drop every instance."""
        for instance in list(self._instances.values()):
            if instance.settings.auto_commit_enable and instance.acknowledged:
                try:
                    await self._commit_positions(instance, dict(instance.acknowledged))
                except Exception:
                    log.exception("final auto commit of %s/%s failed", instance.group, instance.name)
            self._drop(instance)

    def forget_groups(self, groups: Callable[[str], bool]) -> int:
        """Drop, without committing, every instance of a group for which ``groups(group_id)`` holds: this
        broker stopped coordinating those groups, so their state is gone. Returns how many. Idempotent."""
        gone = [i for i in self._instances.values() if groups(i.group)]
        for instance in gone:
            self._drop(instance)
        return len(gone)

    def _drop(self, instance: ConsumerInstance) -> None:
        self._instances.pop((instance.group, instance.name), None)
        if instance.member_id:
            self._coordinator.leave(instance.group, instance.member_id)
            instance.member_id = ""
        instance.changed.set()

    # -- subscription and assignment ----------------------------------------------------------------

    async def subscribe(self, instance: ConsumerInstance, topics: list[str], pattern: str | None) -> None:
        """Subscribe to topics (or a pattern) with group management, replacing any earlier subscription. A
        pattern of an instance with ``may_read`` is resolved over the topics it allows (see the module).

        Raises:
            IllegalStateError: (40903) the instance has manually assigned partitions, or both topics and a
                pattern were given (as Kafka's consumer and both REST proxies refuse them).
            InvalidConsumerConfigError: (42204) neither topics nor a pattern.
            InvalidRequestError: a bad pattern.
        """
        if instance.manual or (topics and pattern is not None):
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive.")
        if not topics and pattern is None:
            raise InvalidConsumerConfigError("give exactly one of topics and topic_pattern")
        resolved = None
        if pattern is not None and instance.may_read is not None:
            resolved = matching_topics(
                compile_pattern(pattern), self._broker.partition_counts(), instance.may_read
            )
            await self._join(instance, resolved, None)
        else:
            await self._join(instance, topics, pattern)
        instance.topics, instance.pattern, instance.resolved = list(topics), pattern, resolved
        instance.changed.set()

    async def refresh(self, instance: ConsumerInstance) -> None:
        """Resolve the instance's pattern again when it is resolved here (``may_read``) and give the group
        what changed: topics created or deleted, ACLs granted or revoked. Never waits for other members of
        the group: the group gets the new subscription at once and the rebalance completes in the
        background when some member must rejoin first (the next refresh sees it done). A no-op for other
        instances. Concurrent calls for one instance give the group the same subscription.

        Raises:
            UnknownMemberError: the instance lost its group membership.
            UnavailableError: this broker stopped coordinating the group.
        """
        if instance.pattern is None or instance.may_read is None or not instance.subscribed:
            return
        resolved = matching_topics(
            compile_pattern(instance.pattern), self._broker.partition_counts(), instance.may_read
        )
        if resolved == instance.resolved:
            return
        try:
            async with asyncio.timeout(0):
                await self._join(instance, resolved, None)
        except (TimeoutError, RebalanceInProgressError):
            return  # the group has it (or a newer join of ours); a later refresh records it once stable
        instance.resolved = resolved
        instance.changed.set()

    async def _join(self, instance: ConsumerInstance, topics: Sequence[str], pattern: str | None) -> None:
        if not topics and pattern is None:
            pattern = NO_TOPIC
        result = await self._coordinator.join(
            instance.group,
            instance.member_id,
            topics=topics,
            pattern=pattern,
            client_id=instance.name,
            auto_rejoin=True,
        )
        instance.member_id = result.member_id

    async def unsubscribe(self, instance: ConsumerInstance) -> None:
        """Drop the subscription (and leave the group) or the manual assignment. Idempotent."""
        if instance.member_id:
            self._coordinator.leave(instance.group, instance.member_id)
        instance.member_id, instance.topics, instance.pattern, instance.resolved = "", [], None, None
        instance.manual = []
        instance.positions.clear()
        instance.acknowledged.clear()
        instance.changed.set()

    def assign(self, instance: ConsumerInstance, partitions: list[TopicPartition]) -> None:
        """Assign partitions by hand (no group management).

        Raises:
            IllegalStateError: (40903) the instance is subscribed.
            UnknownTopicError, UnknownPartitionError: (40401/40402) an unknown topic or partition.
        """
        if instance.subscribed:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive.")
        counts = self._broker.partition_counts()
        for topic, partition in partitions:
            check_partition(counts, topic, partition)
        instance.manual = sorted(set(partitions))
        for tp in list(instance.positions):
            if tp not in instance.manual:
                del instance.positions[tp]
        instance.changed.set()

    def assignment(self, instance: ConsumerInstance) -> list[TopicPartition]:
        """The instance's current partitions: its manual ones, or what the group gave it. For a pattern
        resolved here, only those of topics ``may_read`` still allows (the group may not have caught up
        with a revoked ACL yet)."""
        if not instance.subscribed:
            return list(instance.manual)
        for member in self._coordinator.describe(instance.group).members:
            if member.member_id == instance.member_id:
                may_read = instance.may_read if instance.pattern is not None else None
                if may_read is None:
                    return list(member.assignment)
                allowed = {t: may_read(t) for t in {t for t, _ in member.assignment}}
                return [tp for tp in member.assignment if allowed[tp[0]]]
        return []

    def subscription(self, instance: ConsumerInstance) -> list[str]:
        """The subscribed topics; for a pattern, the topics it matches now (those ``may_read`` allows)."""
        if instance.pattern is None:
            return list(instance.topics)
        return matching_topics(
            re.compile(instance.pattern), self._broker.partition_counts(), instance.may_read
        )

    # -- positions ------------------------------------------------------------------------------------

    def seek(self, instance: ConsumerInstance, offsets: Mapping[TopicPartition, int]) -> None:
        """Set fetch positions of assigned partitions.

        Raises:
            IllegalStateError: (40903) a partition is not assigned to the instance.
            InvalidRequestError: a negative offset.
        """
        assigned = set(self.assignment(instance))
        for tp, offset in offsets.items():
            if tp not in assigned:
                raise IllegalStateError(f"No current assignment for partition {tp[0]}-{tp[1]}")
            if offset < 0:
                raise InvalidRequestError(f"negative offset {offset} for {tp[0]}-{tp[1]}")
        instance.positions.update(offsets)
        instance.changed.set()

    async def seek_to(
        self, instance: ConsumerInstance, partitions: Iterable[TopicPartition], *, end: bool
    ) -> None:
        """Move positions to the start (or the end) of the given assigned partitions.

        Raises:
            IllegalStateError: (40903) a partition is not assigned to the instance.
        """
        targets = {}
        for tp in partitions:
            start, high = await log_bounds(self._broker, tp)
            targets[tp] = high if end else start
        self.seek(instance, targets)

    async def seek_to_timestamps(
        self, instance: ConsumerInstance, timestamps: Mapping[TopicPartition, int]
    ) -> None:
        """Move positions of assigned partitions to the first record at or after each timestamp (ms), or
        to the end of the log when there is none, as Kafka's ``offsetsForTimes`` and ``seek`` do.

        Raises:
            IllegalStateError: (40903) a partition is not assigned to the instance.
            UnknownTopicError, UnknownPartitionError: (40401/40402) an unknown topic or partition.
        """
        counts = self._broker.partition_counts()
        targets = {}
        for tp, timestamp in timestamps.items():
            check_partition(counts, *tp)
            found = await self._broker.offset_for_timestamp(tp[0], tp[1], timestamp)
            if found is None:
                targets[tp] = (await log_bounds(self._broker, tp))[1]
            else:
                targets[tp] = await first_record_at_or_after(self._broker, tp, found, timestamp)
        self.seek(instance, targets)

    # -- records --------------------------------------------------------------------------------------

    async def poll(
        self, instance: ConsumerInstance, timeout_ms: int | None, max_bytes: int, *, topic: str | None = None
    ) -> list[dict[str, Any]]:
        """Records from the instance's partitions (of ``topic`` only, when given), waiting up to
        ``timeout_ms`` when there are none.

        ``max_bytes`` bounds the keys' and values' bytes of the records returned, counted per record; the
        first record is returned whatever its size (see ``rest_v2.convert.consumer_records``).

        Raises:
            OffsetOutOfRangeError: a position is out of range and auto.offset.reset is ``none``.
            CorruptRecordError: stored bytes failed their CRC.
            InvalidRequestError: (42201/42202) a json-format instance met a record that is not JSON and had
                nothing else to return. The message names topic, partition and offset; the position stays
                on that record (so a commit never covers it) until a seek moves it.
        """
        timeout = instance.settings.request_timeout_ms if timeout_ms is None else timeout_ms
        partitions = self.assignment(instance)
        self._forget_revoked(instance, partitions)
        if topic is not None:
            partitions = [tp for tp in partitions if tp[0] == topic]
        instance.acknowledged = dict(instance.positions)
        await self._maybe_auto_commit(instance)
        if not partitions:
            instance.changed.clear()
            await wait_signalled(instance.changed, timeout / 1000)
            return []
        for tp in partitions:
            if tp not in instance.positions:
                instance.positions[tp] = await self._initial_position(instance, tp)
        out: list[dict[str, Any]] = []
        budget = max_bytes
        for tp in partitions:
            if budget <= 0:
                break
            budget -= await self._read_into(instance, tp, budget, 0, out)
        if out or timeout <= 0:
            return out
        await self._wait_for_any(instance, partitions, timeout, max_bytes, out)
        return out

    async def _wait_for_any(
        self,
        instance: ConsumerInstance,
        partitions: list[TopicPartition],
        timeout_ms: int,
        max_bytes: int,
        out: list[dict[str, Any]],
    ) -> None:
        reads = {
            asyncio.ensure_future(
                self._read_into(instance, tp, max_bytes, timeout_ms, out, wait_only=True)
            ): tp
            for tp in partitions
        }
        try:
            pending = set(reads)
            while pending and not out:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    try:
                        task.result()
                    except InvalidRequestError:
                        if out:  # another read returned records: deliver those, the 422 comes next poll
                            continue
                        raise
        finally:
            for task in reads:
                task.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
        if out:
            return
        # a read woke up with bytes only: read them for real, without waiting again
        for tp in partitions:
            await self._read_into(instance, tp, max_bytes, 0, out)
            if out:
                return

    async def _read_into(
        self,
        instance: ConsumerInstance,
        tp: TopicPartition,
        max_bytes: int,
        wait_ms: int,
        out: list[dict[str, Any]],
        *,
        wait_only: bool = False,
    ) -> int:
        position = instance.positions[tp]
        try:
            result = await self._broker.read(
                tp[0], tp[1], position, max_bytes, wait_ms, instance.settings.fetch_min_bytes
            )
        except OffsetOutOfRangeError:
            if instance.settings.auto_offset_reset == "none":
                raise
            instance.positions[tp] = await self._reset_position(instance, tp)
            return 0
        if not result.data or instance.positions.get(tp) != position:
            return 0
        first = not out
        try:
            records, used = consumer_records(
                result.data,
                topic=tp[0],
                partition=tp[1],
                start_offset=position,
                high_watermark=result.high_watermark,
                fmt=instance.settings.format,
                max_bytes=max_bytes,
                at_least_one=first,
            )
        except InvalidRequestError:
            # A record this instance's format cannot render: the position stays on it. Answer 422 only
            # when nothing else is being returned, so records read from other partitions are delivered
            # (their positions already moved) and never committed unseen.
            if out:
                return 0
            raise
        if wait_only and out:
            return 0
        if records:
            instance.positions[tp] = records[-1]["offset"] + 1
            out.extend(records)
        elif first:  # no visible record (control batches only): skip past them
            last_next = position
            for _, header in iter_batches(result.data, verify=False):
                last_next = header.next_offset
            instance.positions[tp] = max(position, min(last_next, result.high_watermark))
        return used

    @staticmethod
    def _forget_revoked(instance: ConsumerInstance, partitions: list[TopicPartition]) -> None:
        """Drop positions of partitions a rebalance gave to another member, without committing them: the
        new owner resumes from the last commit (at least once), and this instance can never overwrite the
        new owner's progress."""
        owned = set(partitions)
        for tp in [tp for tp in instance.positions if tp not in owned]:
            del instance.positions[tp]
            instance.acknowledged.pop(tp, None)

    async def _initial_position(self, instance: ConsumerInstance, tp: TopicPartition) -> int:
        committed = self._coordinator.committed(instance.group, [tp]).get(tp)
        if committed is not None:
            return committed.offset
        return await self._reset_position(instance, tp)

    async def _reset_position(self, instance: ConsumerInstance, tp: TopicPartition) -> int:
        start, high = await log_bounds(self._broker, tp)
        if instance.settings.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(
                f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset is none",
                log_start_offset=start,
                log_end_offset=high,
            )
        return start if instance.settings.auto_offset_reset == "earliest" else high

    # -- offsets --------------------------------------------------------------------------------------

    async def commit(
        self, instance: ConsumerInstance, offsets: Mapping[TopicPartition, tuple[int, str]] | None
    ) -> list[dict[str, Any]]:
        """Commit explicit offsets (each the offset of the *last consumed* record, so ``offset + 1`` is
        stored, as Confluent's REST proxy does), or, with ``None``, everything the instance has returned.

        Returns what was committed as Confluent's proxy answers it: ``{"topic", "partition", "consumed",
        "committed"}`` per partition, ``committed`` being the stored offset (``consumed + 1``).

        Raises:
            IllegalGenerationError / UnknownMemberError: the instance lost its group membership.
            UnknownTopicError, UnknownPartitionError: (40401/40402) an unknown topic or partition.
            InvalidRequestError: a negative offset.
        """
        if offsets is None:
            stored = await self._commit_positions(instance, dict(instance.positions))
            return _committed_json(stored)
        counts = self._broker.partition_counts()
        for (topic, partition), (offset, _) in offsets.items():
            check_partition(counts, topic, partition)
            if offset < -1:
                raise InvalidRequestError(f"invalid offset {offset} for {topic}-{partition}")
        await self._commit(instance, {tp: (o + 1, m) for tp, (o, m) in offsets.items()})
        return _committed_json({tp: o + 1 for tp, (o, _) in offsets.items()})

    def committed(self, instance: ConsumerInstance, partitions: list[TopicPartition]) -> list[dict[str, Any]]:
        stored = self._coordinator.committed(instance.group, partitions)
        return [
            {
                "topic": tp[0],
                "partition": tp[1],
                "offset": stored[tp].offset if tp in stored else -1,
                "metadata": stored[tp].metadata if tp in stored else "",
            }
            for tp in partitions
        ]

    async def _maybe_auto_commit(self, instance: ConsumerInstance) -> None:
        if not instance.settings.auto_commit_enable or not instance.acknowledged:
            return
        now = self._clock.now_ms()
        if now - instance.last_auto_commit_ms < self._auto_commit_interval_ms:
            return
        await self._commit_positions(instance, dict(instance.acknowledged))
        instance.last_auto_commit_ms = now

    async def _commit_positions(
        self, instance: ConsumerInstance, positions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        owned = set(self.assignment(instance))
        positions = {tp: offset for tp, offset in positions.items() if tp in owned}
        if positions:
            await self._commit(instance, {tp: (offset, "") for tp, offset in positions.items()})
        return positions

    async def _commit(
        self, instance: ConsumerInstance, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> None:
        if instance.subscribed:
            generation = self._coordinator.describe(instance.group).generation
            await self._coordinator.commit(
                instance.group, offsets, member_id=instance.member_id, generation=generation
            )
        else:
            await self._coordinator.commit(instance.group, offsets)


def _committed_json(stored: Mapping[TopicPartition, int]) -> list[dict[str, Any]]:
    return [
        {"topic": t, "partition": p, "consumed": offset - 1, "committed": offset}
        for (t, p), offset in sorted(stored.items())
    ]
