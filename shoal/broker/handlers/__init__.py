"""The handler table: which APIs the broker serves, at which versions, by whom.

One table drives both dispatch and the ApiVersions answer, so the broker can
never advertise an API it does not implement (or implement one it does not
advertise). A handler is `fn(broker, ctx, request) -> response | awaitable`;
synchronous handlers (ApiVersions, Metadata) answer without creating a task.
Each API family lives in its own module and registers itself in
`handler_table()` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.protocol.api import api_by_name
from shoal.protocol.kafka4_versions import KAFKA4_ADVERTISED_MIN, KAFKA4_MIN_VERSIONS

# (broker, context, request) -> response, an awaitable of one, or NO_RESPONSE. The request is
# the message class of the handler's API (messages.ProduceRequest for Produce), hence Any here.
HandlerFn = Callable[[Broker, RequestContext, Any], Any]


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    fn: HandlerFn
    advertised_min: int | None = None  # ApiVersions lists this floor instead (Kafka 4's Produce, KAFKA-18659)
    prompt: bool = False  # run under timing.prompt.Prompt, not a Task: its PromptFuture waits resume at once


class HandlerTable:
    def __init__(self) -> None:
        self._by_key: dict[int, Handler] = {}

    def add(
        self,
        name: str,
        fn: HandlerFn,
        min_version: int | None = None,
        max_version: int | None = None,
        *,
        prompt: bool = False,
    ) -> None:
        """Serve API `name` with `fn` for the given versions (default: every released version the
        codec has -- a latest version its spec marks unstable is neither served nor advertised,
        as Kafka with unstable.api.versions.enable=false). `prompt`: a coroutine `fn` returns is
        driven by ``timing.prompt.Prompt``, so it resumes in the turn a PromptFuture it awaits is set."""
        a = api_by_name(name)
        lo = a.min_version if min_version is None else max(min_version, a.min_version)
        hi = a.stable_max_version if max_version is None else min(max_version, a.stable_max_version)
        if a.key in self._by_key:
            raise ValueError(f"{name} registered twice")
        self._by_key[a.key] = Handler(a.key, name, lo, hi, fn, prompt=prompt)

    def kafka4_floor(self) -> None:
        """Serve nothing below Kafka 4.2's version floor (KIP-896): shoal.legacy.api.versions.enable=false."""
        for key, h in self._by_key.items():
            lo = max(h.min_version, KAFKA4_MIN_VERSIONS[key])
            shown = KAFKA4_ADVERTISED_MIN.get(key)
            self._by_key[key] = replace(h, min_version=lo, advertised_min=None if shown is None else min(shown, lo))

    def get(self, api_key: int) -> Handler | None:
        return self._by_key.get(api_key)

    def __iter__(self):
        return iter(sorted(self._by_key.values(), key=lambda h: h.api_key))

    def __len__(self) -> int:
        return len(self._by_key)


def handler_table(consumer_groups: bool = True, legacy: bool = True) -> HandlerTable:
    """Every API this broker serves (`consumer_groups`: the KIP-848 APIs too; `legacy`: the
    versions Kafka 4 removed, else Kafka 4.2's floor)."""
    from shoal.broker.handlers import (
        acls,
        admin,
        api_versions,
        delete_records,
        fetch,
        groups,
        list_offsets,
        metadata,
        produce,
        sasl,
        share_fetch,
        share_groups,
        share_state,
    )
    from shoal.broker.handlers import (
        consumer_groups as consumer_group_apis,
    )

    t = HandlerTable()
    api_versions.register(t)
    metadata.register(t)
    admin.register(t)
    delete_records.register(t)
    produce.register(t)
    fetch.register(t)
    list_offsets.register(t)
    groups.register(t)
    share_groups.register(t)
    share_fetch.register(t)
    share_state.register(t)
    acls.register(t)
    sasl.register(t)
    if consumer_groups:
        consumer_group_apis.register(t)
    if not legacy:
        t.kafka4_floor()
    return t
