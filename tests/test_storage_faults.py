"""Storage faults, handled as Kafka handles a failed log directory.

Faults come through the log's own file layer (``broker.log.fileops.FileOps``,
the broker's ``file_ops``): the error is raised where the kernel's would be,
so these tests need no root.
"""

from __future__ import annotations

import errno
import os
import threading

import pytest

from broker.log.fileops import FileOps


# -- the seam ------------------------------------------------------------------------
def test_file_ops_fail_the_next_calls_and_stall_until_released(tmp_path) -> None:
    files = FileOps()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        files.fail_next("write", errno.ENOSPC, times=2)
        for _ in range(2):
            with pytest.raises(OSError) as e:
                files.write_all(fd, memoryview(b"abc"), 0)
            assert e.value.errno == errno.ENOSPC
        files.write_all(fd, memoryview(b"abc"), 0)  # disarmed after two
        files.fsync(fd)
        assert os.path.getsize(tmp_path / "f") == 3
        release = files.stall("fsync")
        done = threading.Event()
        t = threading.Thread(target=lambda: (files.fsync(fd), done.set()))
        t.start()
        assert not done.wait(0.3)  # hangs, as on a disk that stopped answering
        release()
        assert done.wait(5)
        t.join()
    finally:
        os.close(fd)
