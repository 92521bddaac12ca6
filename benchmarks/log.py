"""Log throughput: PartitionLog next to raw file I/O on the same bytes.

Run: python benchmarks/log.py [--dir DIR] [--mib N]

Appends of 16 KiB and 1 MiB batches, first without fsync (page cache speed,
what a produce with acks=1 costs), then with an fsync after every append
(the worst case for acks=all without group commit).  Then sequential reads
of the whole log in 1 MiB and 16 KiB fetches.  Each line shows the reference
measured in the same run on the same disk: ``os.write`` of the same bytes to a
file opened with O_APPEND (plus ``os.fsync``), and ``os.pread`` of the same
chunk sizes.  Last, recovery after a crash with no recovery point (every batch
CRC-checked) next to reading the files and CRC-32C-ing them.  The ratio is
ours / reference throughput.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import crc32c

from shoal.broker.log import RECOVERY_POINT_FILE, LogConfig, PartitionLog
from shoal.protocol.records import build_batch

MiB = 1 << 20


def make_batch(size: int) -> bytes:
    """A batch of ``size`` bytes (give or take a few) made of ~1 KiB records."""
    count = max(1, size // 1024)
    value_size = 1000
    for _ in range(3):
        records = [(b"key-%06d" % i, os.urandom(value_size), (), 1_700_000_000_000) for i in range(count)]
        batch = build_batch(records)
        value_size += (size - len(batch)) // count
    return batch


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds


def timed(fn: Callable[[], int]) -> float:
    """MiB/s of ``fn`` (which returns the bytes it moved)."""
    t = time.perf_counter()
    moved = fn()
    return rate(moved, time.perf_counter() - t)


def line(label: str, ours: float, ref: float) -> None:
    print(f"  {label:<42} {ours:9.1f} MiB/s   raw {ref:9.1f} MiB/s   {ours / ref:6.2f}x")


class Bench:
    def __init__(self, root: str, total: int) -> None:
        self.root = root
        self.total = total
        self.n = 0

    def fresh(self, name: str) -> str:
        self.n += 1
        path = os.path.join(self.root, f"{name}-{self.n}")
        shutil.rmtree(path, ignore_errors=True)
        return path

    def open_log(self, name: str) -> PartitionLog:
        cfg = LogConfig(segment_bytes=128 * MiB, retention_ms=-1)
        return PartitionLog.open(self.fresh(name), cfg, lambda: int(time.time() * 1000), True)

    def append_ours(self, batch: bytes, count: int, *, fsync: bool, mutable: bool) -> float:
        log = self.open_log("ours")
        bufs = [bytearray(batch) for _ in range(min(count, 64))] if mutable else None

        def run() -> int:
            for i in range(count):
                log.append(bufs[i % len(bufs)] if bufs else batch)
                if fsync:
                    log.flush()
            return count * len(batch)

        try:
            return timed(run)
        finally:
            log.close()

    def append_raw(self, batch: bytes, count: int, *, fsync: bool) -> float:
        path = os.path.join(self.fresh("raw"), "data")
        os.makedirs(os.path.dirname(path))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

        def run() -> int:
            for _ in range(count):
                os.write(fd, batch)
                if fsync:
                    os.fsync(fd)
            return count * len(batch)

        try:
            return timed(run)
        finally:
            os.close(fd)

    def reads(self, batch: bytes) -> tuple[list[tuple[str, float, float]], PartitionLog]:
        log = self.open_log("read")
        count = max(1, self.total // len(batch))
        for _ in range(count):
            log.append(batch)
        log.flush()
        seg = log.segments[0]
        out = []
        for fetch in (MiB, 16 * 1024):
            # warm the page cache, then measure
            for _ in range(2):
                offset, moved = log.log_start_offset, 0
                t = time.perf_counter()
                while offset < log.log_end_offset:
                    r = log.read(offset, fetch)
                    moved += len(r.data)
                    offset = r.next_offset
                ours = rate(moved, time.perf_counter() - t)
            size = seg.size
            t = time.perf_counter()
            pos = 0
            raw_moved = 0
            while pos < size:
                chunk = os.pread(seg.fd, max(fetch, len(batch)), pos)
                raw_moved += len(chunk)
                pos += len(chunk)
            ref = rate(raw_moved, time.perf_counter() - t)
            out.append((f"read {_label(len(batch))} batches, fetch {_label(fetch)}", ours, ref))
        return out, log


def recovery(log: PartitionLog) -> tuple[str, float, float]:
    """Unclean open with no recovery point (every batch CRC-checked) vs pread + crc32c."""
    path, cfg, size = log.path, log.config, log.size_bytes
    files = [s.path() for s in log.segments]
    log.close()
    os.unlink(os.path.join(path, RECOVERY_POINT_FILE))
    t = time.perf_counter()
    again = PartitionLog.open(path, cfg, lambda: int(time.time() * 1000), False)
    ours = rate(size, time.perf_counter() - t)
    assert again.recovery.validated_bytes == size and not again.recovery.truncated
    again.close()
    t = time.perf_counter()
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        pos = 0
        while chunk := os.pread(fd, MiB, pos):
            crc32c.crc32c(chunk)
            pos += len(chunk)
        os.close(fd)
    return "recovery (CRC of every batch)", ours, rate(size, time.perf_counter() - t)


def _label(size: int) -> str:
    return f"{round(size / MiB)} MiB" if size >= MiB - 1024 else f"{round(size / 1024)} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--mib", type=int, default=256, help="MiB appended per no-fsync run")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="shoal-log-bench-", dir=args.dir)
    bench = Bench(root, args.mib * MiB)
    print(f"data in {root} (python {sys.version.split()[0]})")
    try:
        for target in (16 * 1024, MiB):
            batch = make_batch(target)
            label = _label(target)
            count = max(1, bench.total // len(batch))
            print(f"{label} batches ({len(batch)} bytes), {count * len(batch) // MiB} MiB per run:")
            ref = bench.append_raw(batch, count, fsync=False)
            line(
                "append, no fsync (bytearray, in place)",
                bench.append_ours(batch, count, fsync=False, mutable=True),
                ref,
            )
            line(
                "append, no fsync (bytes, copied once)",
                bench.append_ours(batch, count, fsync=False, mutable=False),
                ref,
            )
            synced = max(8, min(count, (64 * MiB) // len(batch) // 4))
            # fsync timings are noisy: best of three, interleaved
            refs, ours_ = [], []
            for _ in range(3):
                refs.append(bench.append_raw(batch, synced, fsync=True))
                ours_.append(bench.append_ours(batch, synced, fsync=True, mutable=True))
            line(f"append + fsync each ({synced} appends)", max(ours_), max(refs))
            results, log = bench.reads(batch)
            results.append(recovery(log))
            for name, ours, raw in results:
                line(name, ours, raw)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
