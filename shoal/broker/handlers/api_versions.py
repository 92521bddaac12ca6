"""ApiVersions: the handler table, as the client sees it."""

from __future__ import annotations

import re
from typing import Any

from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode


def body(broker: Broker, error_code: int = 0) -> Any:
    cls = messages.ApiVersionsResponse
    return cls(
        error_code=error_code,
        api_keys=[
            cls.ApiVersion(
                api_key=h.api_key,
                min_version=h.min_version if h.advertised_min is None else h.advertised_min,
                max_version=h.max_version,
            )
            for h in broker.handlers
        ],
        throttle_time_ms=0,
    )


def handle(broker: Broker, ctx: RequestContext, req: messages.ApiVersionsRequest) -> Any:
    if ctx.api_version >= 3 and not _valid_software(req):
        return body(broker, ErrorCode.INVALID_REQUEST)
    return body(broker)


_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")


def _valid_software(req: Any) -> bool:
    # As Kafka (v3+): non-empty, letters/digits/'.'/'-', alphanumeric at both ends.
    return all(_SOFTWARE.fullmatch(v or "") for v in (req.client_software_name, req.client_software_version))


def register(table: HandlerTable) -> None:
    table.add("ApiVersions", handle)
