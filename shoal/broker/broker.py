"""The Broker: one object holding all of a node's state, passed explicitly.

No module-level state anywhere: tests start several brokers in one process.
The broker owns the data directory (cluster id, clean-shutdown marker), the
topics and their logs, the timer and purgatories, the handler table and the
server. Handlers receive it as their first argument.

Start-up: read meta.properties (create it with a fresh cluster id the first
time), note whether the previous run shut down cleanly (the marker file) and
take the marker away, open every partition (recovering unflushed tails when
the shutdown was not clean), then bind. Stop: stop accepting, let in-flight
requests finish, flush and close logs, write the marker.

Shutdown finishes and exits normally whatever fails on the way (a full disk,
say): every step runs even if an earlier one failed, every partition is
closed, and the marker is written only if every log closed durably (else the
next start recovers the logs as after a crash). The marker survives a full
disk: at start the previous marker is renamed to ``.shoal-running`` (or that
file is created), and a clean stop renames it back, which needs no free
blocks.

Storage faults (Kafka's log dir failure, ``broker.log.log_dir``): the first
storage error in the data directory takes it offline. Waiting acks=-1
produces and long-polling fetches are answered KAFKA_STORAGE_ERROR at once,
partitions answer it from then on, Metadata shows them without a leader, and
background work (retention, compaction, timed flushes) leaves them alone.
No clean-shutdown marker is written for an offline directory (Kafka writes
it only for live ones). Kafka halts the broker when its last log directory
fails; Shoal keeps answering, so clients see the error, and recovers the
directory at the next start.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.broker.config.group_configs import GroupConfigs
from shoal.broker.faults import HOLD_ENV, Fault, FaultInjector, InterceptedRequest
from shoal.broker.handlers import handler_table
from shoal.broker.handlers.api_versions import body as api_versions_body
from shoal.broker.log import LogError
from shoal.broker.log.dir_lock import DirLock
from shoal.broker.log.fileops import FileOps, fsync_dir
from shoal.broker.log.flusher import Flusher
from shoal.broker.log.inline_writes import InlineWrites
from shoal.broker.log.log_dir import LogDir
from shoal.broker.log.writer import ThreadedWriter
from shoal.broker.metrics.counters import BrokerStats
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.fetch_session import FetchSessionCache
from shoal.broker.partition.partition import Partition, fetch_key
from shoal.broker.partition.producer_ids import ProducerIdManager
from shoal.broker.partition.topics import Topic, TopicManager
from shoal.broker.security.acl import CLUSTER_NAME
from shoal.broker.security.authenticator import SaslServer
from shoal.broker.security.principal import USER_TYPE, KafkaPrincipal
from shoal.broker.timing.clock import SystemClock
from shoal.broker.timing.prompt import Prompt
from shoal.broker.timing.purgatory import Purgatory
from shoal.broker.timing.timer import AsyncTimer
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AclOperation, AclResourceType
from shoal.protocol.error_responses import error_response
from shoal.protocol.errors import ErrorCode

_API_VERSIONS = api_by_name("ApiVersions").key
_PRODUCE = api_by_name("Produce").key
log = logging.getLogger("shoal.broker")

CLEAN_SHUTDOWN = ".shoal-clean-shutdown"
# The marker's blocks while the broker runs: renamed to CLEAN_SHUTDOWN at a clean stop.
RUNNING = ".shoal-running"


class Broker:
    def __init__(self, config: Any, clock: Any = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id: int = config.get("node.id")
        self.data_dir = Path(config.data_dir).resolve()
        self.handlers = handler_table(
            "consumer" in config.get("group.coordinator.rebalance.protocols"),
            legacy=config.get("shoal.legacy.api.versions.enable"),
        )
        self.cluster_id = ""
        self.topics: TopicManager | None = None
        self.timer: AsyncTimer | None = None
        self.fetch_purgatory: Purgatory | None = None
        # Every write and fsync of a log file goes through file_ops (tests inject faults there).
        self.file_ops = FileOps()
        self.log_dir = LogDir(str(self.data_dir))
        self.dir_lock = DirLock(self.data_dir)
        self.log_dir.add_listener(self._on_log_dir_failure)
        self.flusher = Flusher(self.file_ops)
        self.log_writer: ThreadedWriter | None = None  # large produce writes, off the event loop; at start
        self.inline_writes = InlineWrites(
            self.clock.monotonic_ms
        )  # whether small ones may be written on the loop (slow writes: no)
        self.coordinator_writer: ThreadedWriter | None = None  # the coordinators' logs: writes and fsyncs
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fetch_sessions = FetchSessionCache(max_slots=config.get("max.incremental.fetch.session.cache.slots"))
        self.producer_ids: ProducerIdManager | None = None
        self.group_configs: Any = None  # share/consumer group configs: the share-group issue
        self.groups: Any = None  # GroupCoordinator, created at start
        self.share_coordinator: Any = None  # ShareCoordinator (share groups on), created at start
        self.share_partitions: Any = None  # SharePartitionManager: share partitions this node leads
        # ACL authorization (authorizer.class.name set): the authorizer and its durable copy, from start
        self.authorizer: Any = None
        self.acl_store: Any = None
        self._cluster_gates: dict[int, Any] = {}
        self.server: Any = None
        self.host = ""
        self.port = 0
        self._endpoints: dict[str, tuple[str, int]] = {}  # other listeners' advertised addresses
        self._background: list[asyncio.Task] = []
        self.clean_start = True
        self.stopped = asyncio.Event()
        self.faults = FaultInjector()  # request fault injection (shoal.testing); unarmed costs one test
        self.faults.hold_from(os.environ.get(HOLD_ENV, ""))  # a test's broker in a child process
        self.stats = BrokerStats()  # counters behind /metrics (shoal.broker.metrics)
        self.ops: Any = None  # the operations HTTP listener (shoal.http.listeners), from start
        self.started = False  # logs recovered and bound: /health/ready also waits for the coordinators
        # SASL listeners' settings (JAAS parsed now: a bad one stops the start) and SCRAM credentials.
        self.sasl = SaslServer(config)

    # -- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        from shoal.broker.net.server import Server

        # The listeners' TLS contexts are built here, before the data directory is touched: a
        # key or certificate that cannot be used stops the start with nothing created.
        server = Server(self)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.dir_lock.acquire()  # DataDirLocked if another broker has it: before anything is read or written
        try:
            # The Kafka listener's address first (accepting only once started): see Server.bind.
            self.server = server
            for listener in self.config.endpoints:
                await self.server.bind(listener)
            await self._start_ops()
            await self._start()
        except BaseException:
            if self.ops is not None:
                await _await_step("closing the operations listener", self.ops.close())
            if self.server is not None:
                await _await_step("closing the listener", self.server.close())
            self.dir_lock.release()
            raise
        self.started = True

    async def _start_ops(self) -> None:
        """The operations listener first: /health/live answers (and ready says 503) while logs recover."""
        from shoal.broker.console.routes import install
        from shoal.broker.metrics.http import OpsServer

        listeners = tuple(self.config.get("shoal.http.listeners") or ())
        self.ops = OpsServer(self, self.stats, listeners, pages=install)
        await self.ops.start()

    async def _start(self) -> None:
        fresh = not (self.data_dir / "meta.properties").exists()
        self.cluster_id = self._load_meta()
        self._remove_deleted_dirs()
        self.producer_ids = ProducerIdManager(self.data_dir)
        self.clean_start = self._take_marker(fresh)
        loop = self._loop = asyncio.get_running_loop()
        self.log_writer = ThreadedWriter(loop, write=self.file_ops.write_all, inline=self.inline_writes)
        if self.config.fsync_acks_all:
            # The coordinators' logs: each write waits for its fsync anyway, so their own thread
            # writes and fsyncs in one trip (a second trip through another thread cost 4 share
            # members on one partition about a tenth of their acknowledged throughput).
            self.coordinator_writer = ThreadedWriter(
                loop, write=self.file_ops.write_all, sync=self.file_ops.fsync, name="shoal-coordinator-writer"
            )
        self.timer = AsyncTimer(loop, self.clock.monotonic_ms)
        self.fetch_purgatory = Purgatory("Fetch", self.timer)
        self.topics = TopicManager(self.data_dir, self._open_partition, self.config.get("max.partitions"))
        self.topics.load(self.clean_start)
        self.group_configs = GroupConfigs(self.data_dir, self.config)
        self.group_configs.load()
        self._start_authorizer()
        from shoal.broker.groups.coordinator import GroupCoordinator

        self.groups = GroupCoordinator(self)
        self.groups.start()
        if self.config.share_groups_enabled:
            from shoal.broker.share_coordinator.service import ShareCoordinator

            self.share_coordinator = ShareCoordinator(self)
            self.share_coordinator.start()
        from shoal.broker.share.partition_manager import SharePartitionManager

        self.share_partitions = SharePartitionManager(self)
        self.sasl.open(self.data_dir)
        await self.server.serve()
        self.host, self.port = self.advertised()
        self._background.append(asyncio.create_task(self._retention_loop()))
        self._background.append(asyncio.create_task(self._flush_loop()))
        self._background.append(asyncio.create_task(self._cleaner_loop()))
        log.info("broker %d started (cluster %s, data %s)", self.node_id, self.cluster_id, self.data_dir)

    def _start_authorizer(self) -> None:
        """ACLs on when authorizer.class.name names the StandardAuthorizer (the config refuses any
        other class); the bindings are loaded before the listener accepts anything."""
        if not self.config.get("authorizer.class.name"):
            return
        from shoal.broker.handlers.authz import CLUSTER_GATES
        from shoal.broker.security.acl_store import AclStore
        from shoal.broker.security.authorizer import Authorizer, parse_super_users

        self.acl_store = AclStore(self.data_dir)
        self.authorizer = Authorizer(
            parse_super_users(self.config.get("super.users")),
            self.config.get("allow.everyone.if.no.acl.found"),
            self.acl_store.load(),
        )
        for name, op in CLUSTER_GATES.items():
            try:
                self._cluster_gates[api_by_name(name).key] = op
            except KeyError:
                continue  # an API this codec does not have (yet)
        log.info("ACL authorization on: %d ACLs loaded", len(self.authorizer.bindings))

    def save_acls(self) -> None:
        self.acl_store.save(self.authorizer.bindings)

    def advertised(self, listener: str | None = None) -> tuple[str, int]:
        """The address clients of ``listener`` (default: the first) are told to use."""
        name = listener or self.config.listener.name
        own = self.config.advertised_for(name)
        host, port = own.host, own.port
        bound = (self.server.bound_by_listener.get(name) if self.server else None) or []
        if port == 0 and bound:
            port = bound[0][1]
        if not host:
            host = bound[0][0] if bound else "127.0.0.1"
        return host, port

    def may_describe_cluster(self, user: str, host: str) -> bool:
        """Whether SASL user ``user`` connecting from ``host`` may DESCRIBE the cluster (always, with
        no authorizer): what the operations listener asks of a /metrics caller."""
        if self.authorizer is None:
            return True
        principal = KafkaPrincipal(USER_TYPE, user)
        return self.authorizer.authorize(principal, host, AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME)

    def endpoint(self, ctx: RequestContext) -> tuple[str, int]:
        """This broker's address as the client that sent ``ctx`` must reach it (its listener's)."""
        name = ctx.listener
        if name == self.config.listener.name:
            return self.host, self.port
        cached = self._endpoints.get(name)
        if cached is None:
            cached = self._endpoints[name] = self.advertised(name)
        return cached

    async def stop(self) -> None:
        """Shut down; every step runs even if an earlier one failed (a full disk, say)."""
        await self._shutdown(clean=True)

    async def halt(self, *, lose_unflushed: bool = False) -> None:
        """Stop as a crash would: a test seam (``shoal.testing``'s ``restart(clean=False)``).

        Connections are cut without answers; no log is flushed, no index file,
        checkpoint, producer snapshot or clean-shutdown marker is written, so
        the next start recovers as after ``kill -9``. With ``lose_unflushed``
        each log also loses what it had not fsynced, as a power cut loses what
        was only in the page cache.
        """
        await self._shutdown(clean=False, lose_unflushed=lose_unflushed)

    async def _shutdown(self, *, clean: bool, lose_unflushed: bool = False) -> None:
        log.info("shutting down" if clean else "halting (as a crash would)")
        server = self.server
        if server is not None:
            server.stop_accepting()
            if clean:
                await _await_step("draining connections", server.drain(timeout=5.0))
        for t in self._background:
            t.cancel()
        for what, close in (
            ("closing the fetch purgatory", self.fetch_purgatory and self.fetch_purgatory.shutdown),
            ("closing the group coordinator", self.groups and self.groups.close),
            ("closing the share partitions", self.share_partitions and self.share_partitions.close),
            ("closing the share coordinator", self.share_coordinator and self.share_coordinator.close),
        ):
            if close:
                _step(what, close)
        await _await_step("finishing fsyncs", self.flusher.close())
        if server is not None:
            await _await_step("closing connections", server.close())
        unclean: list[str] = []
        if self.topics is not None and not clean:
            _step("abandoning the logs", lambda: self.topics.abandon(lose_unflushed=lose_unflushed))
        elif self.topics is not None:
            try:
                unclean = self.topics.close()
            except Exception:
                log.exception("shutdown: closing the logs failed")
                unclean = ["(closing the logs failed)"]
        if self.log_writer is not None:
            _step("stopping the log writer", self.log_writer.close)
        if self.coordinator_writer is not None:
            _step("stopping the coordinators' log writer", self.coordinator_writer.close)
        if self.timer is not None:
            _step("stopping the timer", self.timer.close)
        if clean:
            self._leave_marker(unclean)
        if self.ops is not None:
            await _await_step("closing the operations listener", self.ops.close())
        self.started = False
        self.dir_lock.release()
        log.info("shutdown complete" if clean else "halted")
        self.stopped.set()

    # -- the clean-shutdown marker -------------------------------------------------
    def _take_marker(self, fresh: bool) -> bool:
        """Whether the previous run shut down cleanly; the marker becomes this run's reservation."""
        marker, running = self.data_dir / CLEAN_SHUTDOWN, self.data_dir / RUNNING
        clean = fresh or marker.exists()
        if marker.exists():
            os.replace(marker, running)
            # Durably gone before any log changes: a marker that came back after a power
            # loss would make the next start skip recovering what this run wrote.
            fsync_dir(self.data_dir)
        elif not fresh:
            log.info("previous run did not shut down cleanly: recovering logs")
        if not running.exists():
            try:
                running.write_text("clean\n")
            except OSError as e:
                log.warning("cannot reserve the clean-shutdown marker (%s): a stop on a full disk may not write it", e)
        return clean

    def _leave_marker(self, unclean: list[str]) -> None:
        """Write the clean-shutdown marker if every log is durable; never raises."""
        if self.log_dir.offline or unclean:
            why = (
                f"log directory offline: {self.log_dir.error}"
                if self.log_dir.offline
                else f"{len(unclean)} partitions did not close cleanly"
            )
            log.warning(
                "shutdown finished without a clean-shutdown marker (%s): the next start recovers the logs "
                "as after a crash",
                why,
            )
            return
        marker, running = self.data_dir / CLEAN_SHUTDOWN, self.data_dir / RUNNING
        try:
            try:
                os.replace(running, marker)  # a rename needs no free blocks
            except FileNotFoundError:
                marker.write_text("clean\n")
            fsync_dir(self.data_dir)
        except OSError as e:
            log.warning("clean-shutdown marker not written (%s): the next start recovers the logs as after a crash", e)

    def _load_meta(self) -> str:
        path = self.data_dir / "meta.properties"
        if path.exists():
            props = dict(
                line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#")
            )
            stored_node = int(props.get("node.id", self.node_id))
            if stored_node != self.node_id:
                raise RuntimeError(f"{path} belongs to node {stored_node}, not node.id={self.node_id}")
            return props["cluster.id"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
        os.replace(tmp, path)
        return cluster_id

    def _remove_deleted_dirs(self) -> None:
        """Finish deletions a crash interrupted (partition dirs renamed *-delete)."""
        import shutil

        for path in self.data_dir.glob("*-delete"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    def _open_partition(self, topic: Topic, index: int, clean: bool) -> Partition:
        return Partition.open(self, topic, index, clean)

    def _on_log_dir_failure(self, log_dir: LogDir) -> None:
        """The data directory just went offline (called where the error was met)."""
        if self._loop is not None and not self._loop.is_closed():
            # Not inline: the error may surface inside a purgatory check or a produce.
            self._loop.call_soon(self._answer_waiting)

    def _answer_waiting(self) -> None:
        """Answer what waits on an offline partition: acks=-1 produces and long-polling fetches."""
        self.flusher.fail_offline()
        if self.topics is None or self.fetch_purgatory is None:
            return
        for topic in self.topics:
            for p in topic.partitions:
                if p.offline:
                    self.fetch_purgatory.check_and_complete(fetch_key(topic.name, p.index))

    # -- events ------------------------------------------------------------------
    def on_append(self, partition: Partition) -> None:
        """Records were appended: wake whatever waits on the partition."""
        assert self.fetch_purgatory is not None
        self.fetch_purgatory.check_and_complete(fetch_key(partition.topic.name, partition.index))

    def delete_topic(self, name: str) -> None:
        assert self.topics is not None and self.fetch_purgatory is not None
        topic = self.topics.delete(name)
        self.stats.forget_topic(name)
        for p in topic.partitions:
            self.fetch_purgatory.check_and_complete(fetch_key(name, p.index))
        if self.groups is not None:
            self.groups.on_topic_deleted(name)
            self.groups.share.on_topic_deleted(topic.topic_id)
        if self.share_coordinator is not None:
            self.share_coordinator.on_topic_deleted(topic.topic_id)
        if self.share_partitions is not None:
            self.share_partitions.on_topic_deleted(topic.topic_id)

    # -- request dispatch --------------------------------------------------------
    def dispatch(self, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        h = self.handlers.get(ctx.api_key)
        if h is None or not h.min_version <= ctx.api_version <= h.max_version:
            if ctx.api_key == _API_VERSIONS:
                conn.complete(slot, self.api_versions_error_body())
                return
            conn.abort(f"API {ctx.api_key} v{ctx.api_version} is not served")
            return
        if self.faults.armed:
            fault = self.faults.take(ctx.api_key)
            if fault is not None:
                self._inject(fault, h, ctx, body, slot, conn)
                return
        if self.authorizer is not None and ctx.api_key in self._cluster_gates and not self._gate_open(ctx):
            conn.complete(
                slot, error_response(ctx.api_key, ctx.api_version, body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
            )
            return
        self._handle(h, ctx, body, slot, conn)

    def _gate_open(self, ctx: Any) -> bool:
        """Whether the caller holds the CLUSTER operation its API needs (handlers/authz.CLUSTER_GATES)."""
        op = self._cluster_gates[ctx.api_key]
        return self.authorizer.authorize(ctx.principal, ctx.client_host, op, AclResourceType.CLUSTER, CLUSTER_NAME)

    def _handle(self, h: Any, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        try:
            result = h.fn(self, ctx, body)
        except Exception as e:  # noqa: BLE001 - a bug: logged with its traceback, answered as Kafka does
            self._unexpected(e, f"handler {h.name}", ctx, body, slot, conn)
            return
        self._answer(result, h.name, ctx, body, slot, conn, prompt=h.prompt)

    def _answer(
        self, result: Any, name: str, ctx: Any, body: Any, slot: Any, conn: Any, *, prompt: bool = False
    ) -> None:
        if prompt and inspect.iscoroutine(result):
            self._answer_prompt(result, name, ctx, body, slot, conn)
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._answer_when_done(result, name, ctx, body, slot, conn))
            conn.tasks.add(task)
            task.add_done_callback(conn.tasks.discard)
        else:
            conn.complete(slot, result)

    def _answer_prompt(self, coro: Any, name: str, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        """`_answer_when_done` under a Prompt: answered in the step that ends the handler, and a
        PromptFuture's wait (a share acknowledgement's state write) resumes in the turn it ends."""

        def answered(result: Any) -> None:
            conn.tasks.discard(prompt)
            conn.complete(slot, result)

        def failed(exc: BaseException) -> None:
            conn.tasks.discard(prompt)
            self._handler_failed(exc, name, ctx, body, slot, conn)

        prompt = Prompt(coro, answered, failed)
        conn.tasks.add(prompt)

    async def _answer_when_done(self, pending: Any, name: str, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        """Await a handler and answer in the task's own last step: a done-callback would answer
        a loop turn later, and a loaded loop's turn costs milliseconds."""
        try:
            result = await pending
        except Exception as e:  # noqa: BLE001 - a bug: logged with its traceback, answered as Kafka does
            self._handler_failed(e, name, ctx, body, slot, conn)
            return
        conn.complete(slot, result)

    def _handler_failed(self, exc: BaseException, name: str, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        if not conn.closed:
            self._unexpected(exc, f"handler {name}", ctx, body, slot, conn)

    def _unexpected(self, exc: BaseException, what: str, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        """A handler raised what no rule of ARCHITECTURE.md's "Errors" expects: a bug.

        Logged with its traceback, and answered as Kafka's request handler answers any
        unexpected exception: the request's error response, UNKNOWN_SERVER_ERROR wherever
        it has a place for a code, so the client sees an error and the connection (and the
        client's other requests on it) carry on. An acks=0 Produce expects no answer, so its
        connection is closed instead, as Kafka closes it on a failed acks=0 produce."""
        log.error("%s failed for %s: %r", what, conn.peer, exc, exc_info=exc)
        if ctx.api_key == _PRODUCE and getattr(body, "acks", -1) == 0:
            conn.fail(slot, f"{what} failed on an acks=0 Produce")
            return
        try:
            answer = error_response(ctx.api_key, ctx.api_version, body, ErrorCode.UNKNOWN_SERVER_ERROR, None)
        except Exception:
            log.exception("no error response for %s v%d", what, ctx.api_version)
            conn.fail(slot, f"{what} failed")
            return
        conn.complete(slot, answer)

    def _inject(self, fault: Fault, h: Any, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        """Carry out an armed fault (broker.faults) in place of the request's normal handling."""
        if fault.kind == "fail" and ctx.api_key == _PRODUCE and getattr(body, "acks", -1) == 0:
            conn.abort(f"fault injection: acks=0 {h.name} failed")  # no answer to give: Kafka closes
        elif fault.kind == "fail":
            conn.complete(slot, error_response(ctx.api_key, ctx.api_version, body, fault.error_code, fault.message))
        elif fault.kind == "drop":
            conn.abort(f"fault injection: dropped at {h.name}")
        elif fault.kind == "delay":
            assert self._loop is not None
            self._loop.call_later(fault.delay_ms / 1000, self._handle_if_open, h, ctx, body, slot, conn)
        else:
            assert fault.callback is not None
            request = InterceptedRequest(ctx.api_key, h.name, ctx.api_version, ctx.client_id, ctx.correlation_id, body)
            try:
                result = fault.callback(request)
            except Exception as e:  # noqa: BLE001 - a bug in the callback: logged, answered
                self._unexpected(e, f"fault injection: the {h.name} callback", ctx, body, slot, conn)
                return
            if inspect.isawaitable(result):
                self._answer(self._intercepted(result, h, ctx, body), h.name, ctx, body, slot, conn)
            elif result is None:
                self._handle(h, ctx, body, slot, conn)
            else:
                conn.complete(slot, result)

    async def _intercepted(self, pending: Any, h: Any, ctx: Any, body: Any) -> Any:
        result = await pending
        if result is None:
            result = h.fn(self, ctx, body)
            if inspect.isawaitable(result):
                result = await result
        return result

    def _handle_if_open(self, h: Any, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        if not conn.closed:
            self._handle(h, ctx, body, slot, conn)

    def api_versions_error_body(self) -> Any:
        return api_versions_body(self, ErrorCode.UNSUPPORTED_VERSION)

    def connection_closed(self, conn: Any) -> None:
        """A client went away: its share sessions close and their acquired records go back."""
        if self.share_partitions is not None:
            self.share_partitions.connection_closed(conn)

    # -- background work ---------------------------------------------------------
    async def _retention_loop(self) -> None:
        interval = self.config.get("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            now = self.clock.now_ms()
            for topic in self.topics or ():
                for p in topic.partitions:
                    try:
                        p.enforce_retention(now)
                    except (OSError, LogError) as e:
                        log.error("retention on %s-%d failed: %s", topic.name, p.index, e)

    async def _cleaner_loop(self, interval_s: float = 15.0) -> None:
        """Compact topics with cleanup.policy=compact (internal topics among them).

        Runs on the event loop between requests: a pass rewrites sealed
        segments only, and the internal topics it matters for are small.
        """
        from shoal.broker.log.cleaner import CleaningAborted, LogCleaner

        cleaner = LogCleaner()
        while True:
            await asyncio.sleep(interval_s)
            now = self.clock.now_ms()
            for topic in self.topics or ():
                for p in topic.partitions:
                    if not p.log.config.compacts or p.offline:
                        continue
                    retention = p.settings["delete.retention.ms"]
                    lag = p.settings["min.compaction.lag.ms"]
                    try:
                        if cleaner.needs_cleaning(p.log, now, min_compaction_lag_ms=lag, delete_retention_ms=retention):
                            stats = cleaner.clean(p.log, now, retention, min_compaction_lag_ms=lag)
                            log.info("compacted %s-%d: %s", topic.name, p.index, stats)
                    except OSError as e:  # a storage error: as anywhere else, the directory goes offline
                        log.error("compaction of %s-%d failed: %s", topic.name, p.index, p.log.io_failed(e))
                    except (CleaningAborted, ValueError, LogError) as e:
                        log.error("compaction of %s-%d failed: %s", topic.name, p.index, e)
                    await asyncio.sleep(0)

    async def _flush_loop(self) -> None:
        """Time/count based flushes (log.flush.interval.*) for data not already fsynced."""
        interval = max(self.config.get("log.flush.scheduler.interval.ms"), 10) / 1000
        while True:
            await asyncio.sleep(min(interval, 1.0))
            now = self.clock.now_ms()
            for topic in self.topics or ():
                for p in topic.partitions:
                    if p.offline or not p.log.needs_flush(now):
                        continue
                    try:
                        await self.flusher.flush(p.log, p.log.log_end_offset)
                    except (OSError, LogError) as e:  # the log went offline: it is logged where it happened
                        log.debug("timed flush of %s-%d failed: %s", topic.name, p.index, e)


def _step(what: str, fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:
        log.exception("shutdown: %s failed", what)


async def _await_step(what: str, aw: object) -> None:
    try:
        await aw  # type: ignore[misc]
    except Exception:
        log.exception("shutdown: %s failed", what)
