"""Dynamic per-group configs: the GROUP (32) resource of DescribeConfigs and
IncrementalAlterConfigs (KIP-848, KIP-932).

Why a store of its own: in Kafka these overrides live in the cluster
metadata, not in the group coordinator. They exist independently of any
group: an admin may configure a group before its first member arrives, and
deleting a group (DeleteGroups) leaves its configs in place (Kafka keeps them;
KIP-1142 exists to list such groups). So they cannot ride on group state in
``__consumer_offsets``. Shoal, a single node, keeps them the way it keeps
topics: one small JSON file in the data dir (``group-configs.json``),
rewritten atomically on every change (write a temp file, fsync, rename, fsync
the directory), so a change that was acknowledged survives a crash.

What is stored is exactly what the admin set (strings, as sent). Readers get
typed effective values from ``resolved``/``get``: the group's overrides over
the broker's group.* defaults. The validation rules (a value's own rules, the
broker's group.*.min/max bounds, heartbeat below session timeout) are those of
``broker.config.settings.validate_group_configs``, so an INVALID_CONFIG answer names the
setting and the reason. If the broker later restarts with tighter bounds, an
override stored earlier is kept (and still described as set) but its effective
value is capped into the new bounds, with a warning, as Kafka does.

The object does no networking and keeps no global state; the broker creates
one at start and passes it around.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from shoal.broker.config.settings import (
    GROUP_CONFIGS,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    ShareAutoOffsetReset,
    describe_group_configs,
    parse_share_auto_offset_reset,
    resolve_group_configs,
    validate_group_configs,
)
from shoal.broker.errors import ErrorAnswer
from shoal.protocol.constants import AlterConfigOpType
from shoal.protocol.errors import ErrorCode

__all__ = ["FILE_NAME", "GroupConfigs"]

log = logging.getLogger("shoal.group_configs")

FILE_NAME: Final = "group-configs.json"
_FORMAT_VERSION: Final = 1

_OP_NAMES: Final = {AlterConfigOpType.APPEND: "APPEND", AlterConfigOpType.SUBTRACT: "SUBTRACT"}

Listener = Callable[[str], None]


class GroupConfigs:
    """Every group's config overrides, persisted in ``data_dir/group-configs.json``.

    ``ops`` passed to ``alter`` are IncrementalAlterConfigs entries: objects
    with ``name``, ``config_operation`` and ``value`` attributes.
    """

    def __init__(self, data_dir: str | os.PathLike[str], broker_config: BrokerConfig) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / FILE_NAME
        self.broker_config = broker_config
        self._overrides: dict[str, dict[str, str]] = {}
        self._resolved: dict[str, dict[str, Any]] = {}
        self._listeners: list[Listener] = []
        self._defaults: dict[str, Any] = broker_config.group_defaults()

    # -- start-up --------------------------------------------------------------
    def load(self) -> None:
        """Read the file (absent means no overrides). A malformed file is an error.

        Entries this broker no longer understands (an unknown name, a value
        that no longer parses) are dropped with a warning rather than failing
        start-up; the file is rewritten without them on the next change.
        """
        self._overrides.clear()
        self._resolved.clear()
        if not self.path.exists():
            return
        try:
            meta = json.loads(self.path.read_text(encoding="utf-8"))
            groups = meta["groups"]
            if meta.get("version") != _FORMAT_VERSION or not isinstance(groups, dict):
                raise ValueError(f"unsupported format version {meta.get('version')!r}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RuntimeError(f"{self.path} is not a readable group-config file: {e}") from e
        for group_id, configs in groups.items():
            kept = {name: value for name, value in dict(configs).items() if self._loadable(group_id, name, value)}
            if kept:
                self._overrides[str(group_id)] = kept

    @staticmethod
    def _loadable(group_id: str, name: str, value: Any) -> bool:
        if not isinstance(value, str):
            log.warning("group %r: dropping stored config %s (not a string: %r)", group_id, name, value)
            return False
        try:
            GROUP_CONFIGS[name].parse(value)
        except ConfigError as e:
            log.warning("group %r: dropping stored config %s=%r: %s", group_id, name, value, e)
            return False
        return True

    # -- reads -----------------------------------------------------------------
    def groups(self) -> list[str]:
        """Ids of every group that has at least one override (existing or not)."""
        return sorted(self._overrides)

    def overrides(self, group_id: str) -> dict[str, str]:
        """The group's overrides as set (name -> string value); empty when none."""
        return dict(self._overrides.get(group_id, {}))

    def resolved(self, group_id: str) -> dict[str, Any]:
        """Every group setting's typed effective value for ``group_id``.

        Overrides win over the broker's defaults; a bounded override outside
        the broker's current min/max (tightened since it was set) is capped.
        """
        return dict(self._effective(group_id))

    def get(self, group_id: str, name: str) -> Any:
        """The typed effective value of group setting ``name`` (ConfigError if unknown)."""
        return self._effective(group_id)[GROUP_CONFIGS[name].name]

    def auto_offset_reset(self, group_id: str) -> ShareAutoOffsetReset:
        """share.auto.offset.reset for ``group_id``, parsed (strategy and duration)."""
        return parse_share_auto_offset_reset(self.get(group_id, "share.auto.offset.reset"))

    def describe(self, group_id: str, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries (all settings when ``names`` is None; unknown names skipped).

        A group without overrides, or one that does not exist, is described
        with the broker's defaults.
        """
        if not group_id:
            raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return describe_group_configs(self._overrides.get(group_id, {}), self.broker_config, names)

    # -- changes -----------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(group_id)`` after a group's overrides changed (not on validate_only)."""
        self._listeners.append(fn)

    def alter(self, group_id: str, ops: Iterable[Any], validate_only: bool = False) -> dict[str, str]:
        """Apply IncrementalAlterConfigs operations to one group's overrides.

        Validates the whole resulting override set first; raises
        ErrorAnswer (INVALID_REQUEST for an empty group id or an unknown
        operation, INVALID_CONFIG with the reason otherwise) and changes nothing
        on error. With ``validate_only`` nothing is stored either. Returns the
        group's overrides as they are (or would be) after the change.
        """
        if not group_id:
            raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        current = self._overrides.get(group_id, {})
        new = _apply_ops(current, ops)
        nulls = sorted(name for name, value in new.items() if value is None)
        if nulls:
            raise ErrorAnswer(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for group configs: {','.join(nulls)}"
            )
        try:
            validate_group_configs(new, self.broker_config)
        except ConfigError as e:
            raise ErrorAnswer(ErrorCode.INVALID_CONFIG, str(e)) from None
        stored: dict[str, str] = {k: v for k, v in new.items() if v is not None}
        if validate_only or stored == current:
            return dict(stored)
        self._commit(group_id, stored)
        return dict(stored)

    def _commit(self, group_id: str, stored: dict[str, str]) -> None:
        before = self._overrides.get(group_id)
        if stored:
            self._overrides[group_id] = stored
        else:
            self._overrides.pop(group_id, None)
        try:
            self._persist()
        except OSError as e:
            if before is None:
                self._overrides.pop(group_id, None)
            else:
                self._overrides[group_id] = before
            log.error("could not persist configs of group %r: %s", group_id, e)
            raise ErrorAnswer(ErrorCode.KAFKA_STORAGE_ERROR, f"could not persist group configs: {e}") from e
        self._resolved.pop(group_id, None)
        log.info("group %r configs now %s", group_id, stored or "at broker defaults")
        for fn in list(self._listeners):
            try:
                fn(group_id)
            except Exception:
                log.exception("group-config listener failed for group %r", group_id)

    def _persist(self) -> None:
        meta = {"version": _FORMAT_VERSION, "groups": {g: self._overrides[g] for g in sorted(self._overrides)}}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- effective values --------------------------------------------------------
    def _effective(self, group_id: str) -> dict[str, Any]:
        """Cached effective values; groups without overrides share the defaults."""
        if group_id not in self._overrides:
            return self._defaults
        cached = self._resolved.get(group_id)
        if cached is None:
            cached = self._resolved[group_id] = self._resolve(group_id)
        return cached

    def _resolve(self, group_id: str) -> dict[str, Any]:
        overrides = self._overrides.get(group_id, {})
        values = resolve_group_configs(overrides, self.broker_config)
        bounds = self.broker_config.values
        for name in overrides:
            key = GROUP_CONFIGS[name]
            value = values[name]
            low = bounds.get(key.min_key) if key.min_key else None
            high = bounds.get(key.max_key) if key.max_key else None
            capped = max(value, low) if low is not None else value
            capped = min(capped, high) if high is not None else capped
            if capped != value:
                log.warning(
                    "group %r: %s=%s is outside the broker's bounds [%s, %s]; using %s",
                    group_id,
                    name,
                    value,
                    low,
                    high,
                    capped,
                )
                values[name] = capped
        return values


def _apply_ops(current: Mapping[str, str], ops: Iterable[Any]) -> dict[str, str | None]:
    """The override set after SET/DELETE; APPEND/SUBTRACT need LIST configs, which groups lack."""
    new: dict[str, str | None] = dict(current)
    for op in ops:
        code = op.config_operation
        if code == AlterConfigOpType.SET:
            new[op.name] = op.value
        elif code == AlterConfigOpType.DELETE:
            new.pop(op.name, None)
        elif code in _OP_NAMES:  # (Kafka's controller answers the same: no group config is a LIST)
            raise ErrorAnswer(
                ErrorCode.INVALID_CONFIG, f"Can't {_OP_NAMES[code]} to key {op.name} because its type is not LIST."
            )
        else:
            raise ErrorAnswer(ErrorCode.INVALID_REQUEST, f"unknown config operation {code}")
    return new
