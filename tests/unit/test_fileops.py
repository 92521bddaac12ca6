"""write_json_durably / read_json: whole-file replacement of small state files."""

from __future__ import annotations

from shoal.broker.log.fileops import read_json, write_json_durably


def test_round_trip_and_replacement(tmp_path) -> None:
    path = tmp_path / "sub" / "state.json"
    assert read_json(path) is None
    write_json_durably(path, {"a": [1, 2]})
    assert read_json(path) == {"a": [1, 2]}
    write_json_durably(path, {"b": 3})
    assert read_json(path) == {"b": 3}
    assert not (tmp_path / "sub" / "state.json.tmp").exists()


def test_a_stale_temporary_file_is_ignored(tmp_path) -> None:
    path = tmp_path / "state.json"
    write_json_durably(path, {"v": 1})
    (tmp_path / "state.json.tmp").write_text('{"v": 2, "torn')  # a crash before the rename
    assert read_json(path) == {"v": 1}
    write_json_durably(path, {"v": 3})  # the next write replaces the stale sibling
    assert read_json(path) == {"v": 3}
