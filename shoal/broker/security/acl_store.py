"""The ACLs' durable copy: ``acls.json`` in the data directory, rewritten whole on every change.

ACLs change rarely and are few (hundreds, not millions), so a small JSON file
replaced atomically (``write_json_durably``: temporary file, fsync, rename,
fsync of the directory) is enough: a crash leaves the old set or the new one.
CreateAcls and DeleteAcls answer only after the file is durable, so an entry a
client was told exists survives a kill -9 and one it was told is gone stays
gone. Loaded once at start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from shoal.broker.log.fileops import read_json, write_json_durably
from shoal.broker.security.acl import AclBinding

__all__ = ["FILE_NAME", "AclStore"]

FILE_NAME: Final = "acls.json"
_FORMAT: Final = 1


class AclStore:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> list[AclBinding]:
        doc = read_json(self.path)
        if doc is None:
            return []
        try:
            assert isinstance(doc, dict) and doc.get("format") == _FORMAT
            return [AclBinding.from_json(row) for row in doc["acls"]]
        except (AssertionError, KeyError, TypeError, ValueError) as e:
            raise RuntimeError(f"{self.path} is not a readable ACL file: {e!r}") from e

    def save(self, bindings: list[AclBinding]) -> None:
        write_json_durably(self.path, {"format": _FORMAT, "acls": [b.to_json() for b in bindings]})
