"""The API table: every request/response pair in shoal/schemas/, and codecs on demand.

Why lazy: there are ~40 APIs with up to 17 versions each; compiling all of
them at import would cost start-up time that a client talking to one broker
with five APIs never needs. A codec is compiled the first time a (message,
version) is used and cached for the life of the process.

`Codec.decode` is the only entry point through which bytes become objects: it
turns every low-level failure into a `ProtocolError` naming the field (found by
re-parsing with the construct structure) and the byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from shoal.protocol import spec as S
from shoal.protocol.codegen import compile_message
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.messages import MessageClass, message_class


class Codec:
    """Encoder/decoder for one message spec at one version."""

    __slots__ = ("_decode", "_encode", "_lenient", "api_key", "cls", "spec", "version")

    def __init__(self, spec: S.MessageSpec, version: int) -> None:
        if version not in spec.valid_versions:
            raise ProtocolError(f"{spec.name} has no version {version}", api_key=spec.api_key, version=version)
        self.spec = spec
        self.version = version
        self.api_key = spec.api_key
        self.cls = message_class(spec.name)
        self._decode, self._encode = compile_message(spec, version)
        self._lenient: Any = None

    def decode(self, buf: Any, pos: int = 0, end: int | None = None) -> tuple[Any, int]:
        """Decode one message starting at `pos`; returns (object, position after it).

        Pass a memoryview to get `records` fields as zero-copy slices.
        """
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        if end is None:
            end = len(buf)
        try:
            return self._decode(buf, pos, end)
        except ProtocolError as e:
            raise e.with_context(api_key=self.api_key, version=self.version) from None
        except Exception as e:  # noqa: BLE001 - every failure becomes ProtocolError
            raise self._diagnose(buf, pos, end, e) from None

    def decode_all(self, buf: Any) -> Any:
        obj, _ = self.decode(buf)
        return obj

    def encode_into(self, obj: Any, out: list) -> None:
        """Append the encoded pieces of `obj` to `out` (bytes and memoryviews)."""
        try:
            self._encode(obj, out)
        except ProtocolError as e:
            raise e.with_context(api_key=self.api_key, version=self.version) from None
        except Exception as e:  # noqa: BLE001
            raise ProtocolError(
                f"cannot encode {self.spec.name}: {e!r}", api_key=self.api_key, version=self.version
            ) from None

    def encode_into_lenient(self, obj: Any, out: list) -> None:
        """Like encode_into, but fields this version lacks are silently left out.

        Kafka refuses to serialize a non-default value for a field the
        version does not have (unless the spec marks it ignorable). That
        strictness suits requests a client builds for one version; a broker
        builds one response object for whatever version was asked and wants
        the newer fields simply dropped for older clients.
        """
        if self._lenient is None:
            self._lenient = compile_message(self.spec, self.version, strict=False)[1]
        try:
            self._lenient(obj, out)
        except Exception as e:  # noqa: BLE001
            raise ProtocolError(
                f"cannot encode {self.spec.name}: {e!r}", api_key=self.api_key, version=self.version
            ) from None

    def encode(self, obj: Any) -> bytes:
        out: list = []
        self.encode_into(obj, out)
        return b"".join(out)

    def _diagnose(self, buf: Any, pos: int, end: int, cause: BaseException) -> ProtocolError:
        """Re-parse with the construct structure to name the field that failed."""
        path, offset = "", None
        try:
            from shoal.protocol.construct_codec import locate_failure

            path, offset = locate_failure(self.spec, self.version, bytes(buf[pos:end]))
        except Exception:  # noqa: BLE001 - diagnostics must never raise
            pass
        if offset is not None:
            offset += pos
        return ProtocolError(
            f"malformed {self.spec.name}: {type(cause).__name__}: {cause}",
            api_key=self.api_key,
            version=self.version,
            path=path,
            offset=offset,
        )


@cache
def codec(name: str, version: int) -> Codec:
    """The codec of spec `name` (file stem, e.g. "FetchResponse") at `version`."""
    return Codec(S.load(name), version)


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str  # e.g. "Fetch"
    request: S.MessageSpec
    response: S.MessageSpec

    @property
    def min_version(self) -> int:
        return self.request.valid_versions.lo

    @property
    def max_version(self) -> int:
        hi = self.request.valid_versions.hi
        assert hi is not None
        return hi

    @property
    def stable_max_version(self) -> int:
        """The highest released version: the latest one is left out when the spec marks it unstable."""
        return self.max_version - 1 if self.request.latest_version_unstable else self.max_version

    def request_header_version(self, version: int) -> int:
        return 2 if self.request.flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers always use header v0 so that a client that sent
        # a version the broker does not know can still read the answer.
        if self.name == "ApiVersions":
            return 0
        return 1 if self.response.flexible(version) else 0

    def request_codec(self, version: int) -> Codec:
        return codec(self.request.name, version)

    def response_codec(self, version: int) -> Codec:
        return codec(self.response.name, version)

    def request_class(self) -> MessageClass:
        return message_class(self.request.name)

    def response_class(self) -> MessageClass:
        return message_class(self.response.name)


@cache
def apis() -> dict[int, Api]:
    """All APIs that have both a request and a response spec, by API key."""
    specs = S.all_specs()
    out: dict[int, Api] = {}
    for name, req in specs.items():
        if req.type != "request" or req.api_key is None:
            continue
        base = name.removesuffix("Request")
        resp = specs.get(base + "Response")
        if resp is None:
            continue
        out[req.api_key] = Api(req.api_key, base, req, resp)
    return dict(sorted(out.items()))


def api(key: int) -> Api | None:
    return apis().get(key)


def api_by_name(name: str) -> Api:
    for a in apis().values():
        if a.name == name:
            return a
    raise KeyError(name)
