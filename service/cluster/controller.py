"""The controller: one broker, elected through the metadata store, decides every partition's leader and ISR.

**Election.** A broker whose registration is live campaigns when the ``controller`` key is absent, with one
commit conditioned on that absence and on the ``controller_epoch`` revision it read::

    [Compare(controller, 0), Compare(controller_epoch, read_rev)]
      -> [Put(controller_epoch, n + 1), Put(controller, {broker_id, n + 1}, lease=membership.lease)]

Exactly one campaign per epoch can win. The winner remembers the revision of that commit (its *fence*: the
``controller`` key's ``mod_revision``). The ``controller`` key lives under the winner's lease, so it vanishes
when the winner's session does, and every other broker campaigns again.

**Acting.** Every write is a commit that also compares ``controller`` with the fence and each written key
with the revision it was decided from, so a deposed controller (its lease expired, a newer controller
elected) cannot change anything, and two decisions about one partition never race. A failed commit
re-reads the ``controller`` key: changed, the controller stops acting at once and campaigns again; unchanged,
it waits for the watch to bring what changed and decides again.

**Decisions** (a reconcile pass after every change the watch brings, see :func:`decide_partition`):
leaders and ISRs for new partitions, gone brokers out of every ISR, failover to a live ISR member when a
leader's broker is gone (to any live replica only with ``unclean.leader.election.enable``), re-election of
leaderless partitions when an ISR member returns, and, every ``leader.imbalance.check.interval.seconds``
when ``auto.leader.rebalance.enable``, preferred-leader election. Topic keys and partition states are read
from the store's whole key space through one watch (the controller's own view, independent of the broker's
metadata cache).

**ISR changes** come from leaders (:meth:`Controller.alter_partition`, Kafka's AlterPartition): checked
against the store and written through the same fenced, serialised commit as the reconcile pass's decisions,
so the two never overwrite each other; the loser of a race reads again and decides on the new state.

Two tasks, owned by :class:`Controller` and cancelled and awaited by :meth:`Controller.close`: the *sync*
task (range + watch, keeping the view) and the *act* task (campaign and reconcile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from tierlog.service.cluster.controller_view import View, Write
from tierlog.service.cluster.decisions import check_alter, decide_partition
from tierlog.service.cluster.membership import Membership
from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    LeaseExpiredError,
    MetadataStore,
    MetadataStoreError,
    Op,
    Put,
)
from tierlog.service.cluster.model import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    NO_LEADER,
    AlterPartitionRequest,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    broker_key,
    partition_key,
    topic_key,
)
from tierlog.service.metrics import Metrics, Sample
from tierlog.service.settings.config import Settings
from tierlog.tiering.log.clock import Clock, SystemClock
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    NotControllerError,
    UnavailableError,
    UnknownPartitionError,
    UnknownTopicError,
)

__all__ = ["Controller", "check_alter", "decide_partition"]

log = logging.getLogger("tierlog.cluster.controller")

# Partitions per commit: etcd refuses a transaction of more than 128 operations (its default --max-txn-ops).
BATCH_PARTITIONS = 32
UNCLEAN = "unclean.leader.election.enable"
# Attempts of one AlterPartition whose commit keeps losing to concurrent writes before it answers retriable.
ALTER_ATTEMPTS = 16


class Controller:
    """Campaigns for the controller role and, while it holds it, keeps every partition's leadership right.

    Event-loop only. ``active`` is true only while this broker holds the role under its current lease; it
    turns false at once when the membership reports the lease lost or the view shows the ``controller`` key
    changed. ``controller_id`` and ``epoch`` are the controller and epoch this broker knows (-1 and the last
    epoch handed out when there is none). The decisions are described in the module doc.
    """

    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        membership: Membership,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.membership = membership
        self._rebalance = settings.auto_leader_rebalance_enable
        self._rebalance_ms = settings.leader_imbalance_check_interval_seconds * 1000
        self._retry_s = min(1.0, settings.broker_heartbeat_interval_ms / 1000)
        self._clock: Clock = clock or SystemClock()
        self._metrics = metrics
        self._view: View | None = None
        self._active = False
        self._fence = 0  # the controller key's mod_revision written by our election; 0 when not active
        self._lease = 0  # the lease our controller key lives under
        self._own_epoch = 0
        self._controller_id = NO_LEADER
        self._epoch = 0
        self._next_rebalance_ms = 0
        self._preferred_pending = False
        self._reconciled = 0
        self._passes_started = 0
        self._passes_done = 0
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._write_lock = asyncio.Lock()
        self._unclean_default = settings.topic_defaults.get(UNCLEAN, "false")
        membership.add_listener(self._on_membership_change)
        if metrics is not None:
            metrics.describe(
                "tierlog_controller_active", "gauge", "1 while this broker is the active controller"
            )
            metrics.describe("tierlog_controller_epoch", "gauge", "The controller epoch this broker knows")
            metrics.describe(
                "tierlog_controller_elections_total", "counter", "Controller elections this broker won"
            )
            metrics.describe(
                "tierlog_leader_elections_total",
                "counter",
                "Partition leaders chosen by this broker as controller, by reason "
                "(new, failover, recovered, preferred, unclean)",
            )
            metrics.add_collector(self._collect)

    # ---- state -------------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._active

    @property
    def epoch(self) -> int:
        """This controller's epoch when active, else the epoch of the controller it knows (or the last one
        handed out)."""
        return self._own_epoch if self._active else self._epoch

    @property
    def controller_id(self) -> int:
        """The controller this broker knows: its own id when active, -1 when there is none."""
        return self.broker_id if self._active else self._controller_id

    @property
    def reconciled_revision(self) -> int:
        """The newest store revision after which this controller had nothing left to do (0 before its first
        pass): an active controller's writes for every change up to it are in the store."""
        return self._reconciled

    async def wait_for(self, predicate: Callable[[], bool]) -> bool:
        """Wait until ``predicate()`` holds, re-checking after every pass and role change: True, or False
        when the controller closes first. Bound it with ``asyncio.timeout``. Safe concurrently."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or predicate())
        return predicate()

    async def wait_reconciled(self, revision: int) -> bool:
        """Wait until the controller has seen store revision ``revision`` and has nothing left to write for
        it (see :attr:`reconciled_revision`): True, or False when it closes first. Safe concurrently."""
        return await self.wait_for(lambda: self._reconciled >= revision)

    async def tick(self) -> bool:
        """Re-evaluate now, timers included (after a test advances an injected clock), and wait until a pass
        that started after this call has finished: True, or False when the controller closes first. Safe
        concurrently."""
        started = self._passes_started
        self._wake.set()
        return await self.wait_for(lambda: self._passes_done > started)

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the sync and act tasks. Raises RuntimeError when already started or closed."""
        if self._tasks or self._closed:
            raise RuntimeError("controller already started")
        self._tasks = [
            asyncio.create_task(self._sync_loop(), name=f"controller-sync-{self.broker_id}"),
            asyncio.create_task(self._act_loop(), name=f"controller-act-{self.broker_id}"),
        ]

    async def close(self) -> None:
        """Stop acting: cancel and await both tasks. Writes nothing (the ``controller`` key goes with the
        membership's lease). Idempotent; never raises."""
        self._closed = True
        self._resign("closing")
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._notify()

    # ---- the sync task: the view ----------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        while True:
            try:
                await self._sync_once()
            except MetadataStoreError as err:
                log.warning("controller %d: metadata watch broken, reading again: %s", self.broker_id, err)
            except Exception:
                log.exception("controller %d: metadata watch failed, reading again", self.broker_id)
            await asyncio.sleep(self._retry_s)

    async def _sync_once(self) -> None:
        kvs, revision = await self.store.range("")
        self._view = View.load(kvs, revision)
        self._observe(self._view)
        self._wake.set()
        watch = self.store.watch("", revision + 1)
        try:
            async for event in watch:
                self._view.apply(event)
                self._observe(self._view)
                self._wake.set()
        finally:
            aclose = getattr(watch, "aclose", None)
            if aclose is not None:
                await aclose()

    # ---- the act task: campaign and reconcile ------------------------------------------------------------

    async def _act_loop(self) -> None:
        while True:
            await wait_signalled(self._wake, self._timer_timeout())
            self._wake.clear()
            view = self._view
            if view is None:
                continue
            self._passes_started += 1
            revision = view.revision
            acted = True
            try:
                acted = await self._step(view)
            except LeaseExpiredError:
                pass  # campaigned under a lease just lost: the membership registers again and wakes us
            except MetadataStoreError as err:
                log.warning("controller %d: metadata store failed, retrying: %s", self.broker_id, err)
                await self._retry_later()
            except Exception:
                log.exception("controller %d: reconcile pass failed, retrying", self.broker_id)
                await self._retry_later()
            if not acted:
                self._reconciled = max(self._reconciled, revision)
            self._passes_done += 1
            await self._notify()

    async def _retry_later(self) -> None:
        await asyncio.sleep(self._retry_s)
        self._wake.set()

    def _timer_timeout(self) -> float | None:
        if not (self._active and self._rebalance):
            return None
        return max(0.0, (self._next_rebalance_ms - self._clock.now_ms()) / 1000)

    async def _step(self, view: View) -> bool:
        """One pass; True when it wrote (or tried to), so another pass must follow."""
        self._observe(view)
        if not self._active:
            if view.controller_rev or view.epoch is None or not self.membership.registered.is_set():
                return False
            await self._campaign(view, view.epoch)
            return True
        due = self._rebalance and self._clock.now_ms() >= self._next_rebalance_ms
        if due:
            self._next_rebalance_ms = self._clock.now_ms() + self._rebalance_ms
        preferred = due or self._preferred_pending
        writes = self._plan(view, preferred)
        done = await self._execute(writes) if writes else True
        # A preferred pass cut short by a refused commit finishes on the next pass, not an interval later.
        self._preferred_pending = preferred and not done
        return bool(writes)

    async def _campaign(self, view: View, last_epoch: int) -> None:
        lease, epoch = self.membership.lease, last_epoch + 1
        record = ControllerRecord(self.broker_id, epoch)
        revision = await self.store.commit(
            [Compare(CONTROLLER, 0), Compare(CONTROLLER_EPOCH, view.epoch_rev)],
            [Put(CONTROLLER_EPOCH, str(epoch).encode()), Put(CONTROLLER, record.encode(), lease=lease)],
        )
        if revision is None or self._closed or lease != self.membership.lease:
            return
        self._active, self._fence, self._lease, self._own_epoch = True, revision, lease, epoch
        self._next_rebalance_ms = self._clock.now_ms() + self._rebalance_ms
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        if self._metrics is not None:
            self._metrics.inc("tierlog_controller_elections_total")

    def _observe(self, view: View) -> None:
        """Take the known controller from ``view``; stop acting when it shows we were deposed."""
        # Strictly later: the events of one revision arrive one by one, and ours put controller_epoch first.
        if self._active and view.revision > self._fence and view.controller_rev != self._fence:
            self._resign(f"the controller key changed (revision {view.controller_rev}, ours {self._fence})")
        self._controller_id = view.controller.broker_id if view.controller else NO_LEADER
        if view.controller is not None:
            self._epoch = view.controller.epoch
        elif view.epoch is not None:
            self._epoch = view.epoch

    def _on_membership_change(self) -> None:
        if self._active and (self.membership.lost.is_set() or self.membership.lease != self._lease):
            self._resign("its lease is lost")
        self._wake.set()

    def _resign(self, why: str) -> None:
        if self._active:
            log.warning(
                "broker %d stops acting as controller (epoch %d): %s", self.broker_id, self._own_epoch, why
            )
        self._active, self._fence, self._lease = False, 0, 0
        self._preferred_pending = False

    # ---- AlterPartition: ISR changes asked by leaders ---------------------------------------------------

    async def alter_partition(self, request: AlterPartitionRequest) -> PartitionState:
        """Change a partition's ISR as its leader asks (Kafka's AlterPartition, KIP-497, with KIP-841's
        eligibility rule); the state now in the store.

        The request is checked against the store (not the view, which may lag the leader's own metadata):
        the leader named by ``broker_id`` must be the current leader at ``leader_epoch`` and still
        registered, ``partition_epoch`` the current one, and the new ISR non-empty, without duplicates, hold
        the leader, and list only replicas of the partition, every member it adds a live (registered)
        broker. An unchanged ISR answers the current state and writes nothing. Otherwise one commit through
        the controller's single write path (:meth:`_commit`), compared on the controller fence, the topic and
        partition keys and the registrations of the leader and of each added member, writes the new ISR with
        ``partition_epoch + 1`` and this controller's epoch. A lost compare reads and checks everything again:
        the reconcile pass or another request may have made this one stale, and it then fails as it would
        have on the new state.

        Raises: NotControllerError (this broker is not, or stops being, the active controller; the message
        names the controller when known), UnknownTopicError, UnknownPartitionError (no such partition or no
        state yet), FencedLeaderEpochError (``broker_id`` is not the current leader, its leader epoch is not
        current, or its registration is gone), InvalidUpdateVersionError (stale ``partition_epoch``),
        InvalidRequestError (empty ISR, duplicates, leader missing), IneligibleReplicaError (a member not a
        replica, or an added member not live), UnavailableError (the store failed, or the state kept
        changing under the request), CorruptRecordError (an unreadable stored record). Safe concurrently with
        itself and with the reconcile pass; idempotent (a repeat after success is fenced or answers the
        unchanged state).
        """
        where = f"{request.topic}-{request.partition}"
        for _ in range(ALTER_ATTEMPTS):
            self._check_controller()
            topic_kv = await self.store.get(topic_key(request.topic))
            if topic_kv is None:
                raise UnknownTopicError(f"Unknown topic: {request.topic}")
            assignment = TopicAssignment.decode(topic_kv.key, topic_kv.value)
            if not 0 <= request.partition < assignment.partitions:
                raise UnknownPartitionError(f"Unknown partition: {where}")
            state_kv = await self.store.get(partition_key(request.topic, request.partition))
            if state_kv is None:
                raise UnknownPartitionError(f"Partition {where} has no leader yet")
            current = PartitionState.decode(state_kv.key, state_kv.value)
            replicas = assignment.replicas[request.partition]
            check_alter(request, current, replicas, where)
            new_isr = tuple(request.new_isr)
            if new_isr == current.isr:
                return current
            registrations: dict[int, int] = {}
            for broker in [request.broker_id] + [m for m in new_isr if m not in current.isr]:
                kv = await self.store.get(broker_key(broker))
                if kv is None and broker == request.broker_id:
                    raise FencedLeaderEpochError(
                        f"Broker {broker} is not a live broker: it cannot change the ISR of {where}"
                    )
                if kv is None:
                    raise IneligibleReplicaError(
                        f"Broker {broker} cannot join the ISR of {where}: it is not a live broker"
                    )
                registrations[broker] = kv.mod_revision
            self._check_controller()
            fence = self._fence  # the term this state is written in (and its controller epoch)
            state = PartitionState(
                current.leader, current.leader_epoch, new_isr, current.partition_epoch + 1, self._own_epoch
            )
            write = Write(request.topic, topic_kv.mod_revision, request.partition, state_kv.mod_revision,
                           state, None, current.leader, current.isr)  # fmt: skip
            if await self._commit([write], registrations, fence=fence):
                return state
        raise UnavailableError(f"The state of {where} kept changing while its ISR change was decided; retry")

    async def commit_new_topic(
        self, assignment: TopicAssignment, compares: Sequence[Compare], ops: Sequence[Op]
    ) -> bool:
        """Commit a new topic (``compares`` and ``ops``: its key and name claim, as the caller builds them)
        together with the initial state of every partition, as KRaft's controller writes a CreateTopics'
        topic and partition records in one batch; the reconcile pass then finds nothing to decide for it.

        The states are what :func:`decide_partition` decides for a partition with no state from this
        controller's view, and the commit is fenced as every controller write (:meth:`_commit`): compared on
        the controller key, on each partition key being absent and on the registration of each leader chosen.
        False when this broker is not the active controller, the topic has more partitions than one commit
        holds (:data:`BATCH_PARTITIONS`), or the commit was refused (the caller commits the topic alone; a
        refusal of the fence also resigns). Raises MetadataStoreError, LeaseExpiredError. Safe concurrently
        with the reconcile pass and :meth:`alter_partition` (one write at a time); not idempotent.
        """
        if assignment.partitions > BATCH_PARTITIONS:
            return False
        async with self._write_lock:
            view = self._view
            if not self._active or not self._fence or view is None:
                return False
            fence, live, name = self._fence, frozenset(view.brokers), assignment.name
            writes: list[Write] = []
            leaders: dict[int, int] = {}
            for index, replicas in enumerate(assignment.replicas):
                decided = decide_partition(None, replicas, live, controller_epoch=self._own_epoch)
                if decided is None:  # never for a partition with no state; kept for the type checker
                    return False
                state, reason = decided
                writes.append(Write(name, 0, index, 0, state, reason, NO_LEADER))
                if state.leader != NO_LEADER:
                    leaders[state.leader] = view.broker_revs.get(state.leader, 0)
            fenced = [Compare(CONTROLLER, fence), *compares]
            fenced += [Compare(partition_key(name, w.partition), 0) for w in writes]
            fenced += [Compare(broker_key(b), rev) for b, rev in sorted(leaders.items()) if rev]
            states = [Put(partition_key(name, w.partition), w.state.encode()) for w in writes if w.state]
            if await self.store.commit(fenced, [*ops, *states]) is None:
                current = await self.store.get(CONTROLLER)
                if current is None or current.mod_revision != fence:
                    self._resign("a fenced write was refused: the controller key changed")
                return False
        for write in writes:
            self._record(write)
        return True

    def _check_controller(self) -> None:
        if self._active:
            return
        known = self._controller_id
        named = f"broker {known} is" if known != NO_LEADER else "no controller is known to be"
        raise NotControllerError(f"Broker {self.broker_id} is not the active controller ({named} active)")

    # ---- decisions ---------------------------------------------------------------------------------------

    def _plan(self, view: View, preferred: bool) -> list[Write]:
        live = frozenset(view.brokers)
        writes: list[Write] = []
        for name in sorted(view.topics):
            assignment, topic_rev = view.topics[name]
            unclean = self._unclean_enabled(assignment)
            states = view.partitions.get(name, {})
            for index, replicas in enumerate(assignment.replicas):
                state, read_rev = states.get(index, (None, 0))
                # registrations are only ever created (never rewritten): one newer than the state is a
                # broker that restarted after the state was decided
                restarted = frozenset(b for b in replicas if view.broker_revs.get(b, 0) > read_rev)
                decided = decide_partition(
                    state, replicas, live, controller_epoch=self._own_epoch, preferred=preferred,
                    unclean=unclean, restarted=restarted,
                )  # fmt: skip
                if decided is not None:
                    old_leader, old_isr = (NO_LEADER, None) if state is None else (state.leader, state.isr)
                    writes.append(
                        Write(name, topic_rev, index, read_rev, decided[0], decided[1], old_leader, old_isr)
                    )
        for name, states in sorted(view.partitions.items()):
            assignment_entry = view.topics.get(name)
            count, topic_rev = (
                (0, 0) if assignment_entry is None else (assignment_entry[0].partitions, assignment_entry[1])
            )
            for index, (state, read_rev) in sorted(states.items()):
                if index >= count:
                    old_leader = NO_LEADER if state is None else state.leader
                    writes.append(Write(name, topic_rev, index, read_rev, None, None, old_leader))
        return writes

    def _unclean_enabled(self, assignment: TopicAssignment) -> bool:
        """``unclean.leader.election.enable`` of a topic: its override, else the broker default."""
        value = assignment.configs.get(UNCLEAN, self._unclean_default)
        return value.strip().lower() == "true"

    async def _execute(self, writes: list[Write]) -> bool:
        """Commit ``writes`` topic by topic in batches; False when a commit was refused (re-read first)."""
        by_topic: dict[str, list[Write]] = {}
        for write in writes:
            by_topic.setdefault(write.topic, []).append(write)
        for topic_writes in by_topic.values():
            for start in range(0, len(topic_writes), BATCH_PARTITIONS):
                if not self._active:
                    return False
                if not await self._commit(topic_writes[start : start + BATCH_PARTITIONS]):
                    return False
        return True

    async def _commit(
        self, batch: list[Write], brokers: Mapping[int, int] | None = None, *, fence: int | None = None
    ) -> bool:
        """Commit one batch of decisions about one topic: compared on the controller fence, the topic key,
        each partition key and the registration of each broker the decisions rest on (``brokers``: id ->
        revision; by default each new leader's registration as the view read it). False when refused (the
        controller resigns when the refusal was its fence) or when this broker is not active any more, or
        no longer under ``fence`` when given (the term the batch was decided in).

        Every write of this controller (the reconcile pass and :meth:`alter_partition`) goes through here,
        one at a time (``_write_lock``), and only while active: the fence is read under the lock, after
        every wait, so a commit never runs with a stale fence (nor with none: 0 would compare "absent")."""
        async with self._write_lock:
            if not self._active or not self._fence or fence not in (None, self._fence):
                return False
            fence = self._fence
            first = batch[0]
            compares = [Compare(CONTROLLER, fence), Compare(topic_key(first.topic), first.topic_rev)]
            ops: list[Op] = []
            leaders: set[int] = set()
            for write in batch:
                key = partition_key(write.topic, write.partition)
                compares.append(Compare(key, write.read_rev))
                ops.append(Delete(key) if write.state is None else Put(key, write.state.encode()))
                if write.state is not None and write.state.leader != NO_LEADER:
                    leaders.add(write.state.leader)
            if brokers is None:
                view = self._view
                # a leader chosen is still the registration it was chosen from
                brokers = {b: 0 if view is None else view.broker_revs.get(b, 0) for b in leaders}
            for broker, revision in sorted(brokers.items()):
                if revision:
                    compares.append(Compare(broker_key(broker), revision))
            if await self.store.commit(compares, ops) is None:
                current = await self.store.get(CONTROLLER)
                if current is None or current.mod_revision != fence:
                    self._resign("a fenced write was refused: the controller key changed")
                return False
        for write in batch:
            self._record(write)
        return True

    def _record(self, write: Write) -> None:
        state = write.state
        if state is None:
            log.info(
                "controller: removed the state of %s-%d (no such partition)", write.topic, write.partition
            )
            return
        if write.reason is None:
            if write.old_isr is not None and write.old_isr != state.isr:
                log.info("controller epoch %d: %s-%d isr %s -> %s (partition epoch %d)", self._own_epoch,
                         write.topic, write.partition, list(write.old_isr), list(state.isr),
                         state.partition_epoch)  # fmt: skip
            return
        if write.reason == "unclean":
            log.warning("controller epoch %d: %s-%d unclean leader election: leader %d -> %d, which was not "
                        "in sync (isr was %s); records only the lost replicas held may be lost (leader "
                        "epoch %d)", self._own_epoch, write.topic, write.partition, write.old_leader,
                        state.leader, list(write.old_isr or ()), state.leader_epoch)  # fmt: skip
        else:
            level = logging.DEBUG if write.reason == "new" else logging.INFO
            log.log(level, "controller epoch %d: %s-%d leader %d -> %d (%s, leader epoch %d, isr %s)",
                    self._own_epoch, write.topic, write.partition, write.old_leader, state.leader,
                    write.reason, state.leader_epoch, list(state.isr))  # fmt: skip
        if self._metrics is not None and state.leader != NO_LEADER:
            self._metrics.inc("tierlog_leader_elections_total", reason=write.reason)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _collect(self) -> Iterable[Sample]:
        return [
            Sample("tierlog_controller_active", 1.0 if self._active else 0.0),
            Sample("tierlog_controller_epoch", float(self.epoch)),
        ]

    def __repr__(self) -> str:
        return f"Controller(broker={self.broker_id}, active={self._active}, epoch={self.epoch})"
