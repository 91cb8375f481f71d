"""Writing downloaded bytes to the node's NVMe: full writes, page-cache-friendly slices, and O_DIRECT where the
file system allows it."""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

from node_agent.runtime.fs import DirectIoAlignment, allocate, direct_io_alignment


def pwrite_all(descriptor: int, data, offset: int) -> None:
    """pwrite may write less than asked (a filling disk); the retry then raises ENOSPC."""
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, offset)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, offset = view[written:], offset + written


# A buffer goes to the page cache in writes of this size. ext4 sizes a new page-cache folio by the write that
# creates it (Linux 6.17, docs/upstream-facts.md): 2 GiB in 4 MiB writes cost 6-7.5 s of system time here, in
# 32-256 KiB writes 0.6-2.5 s (2 cores, Linux 6.18, 2026-12-02). Up to 32 KiB a folio comes from the per-CPU page
# lists; on a VM whose host had taken its freed memory back, the agent's download of 2.1 GB cost 3.95 s of CPU in
# 64 KiB writes and 2.58 s in 32 KiB ones (medians of 9 interleaved runs, 2026-12-03).
WRITE_SLICE_BYTES = 32 * 2**10


def write_slices(buffer: memoryview) -> list[memoryview]:
    """The buffer cut once into views of WRITE_SLICE_BYTES (the last may be shorter), reused by every flush."""
    return [buffer[at : at + WRITE_SLICE_BYTES] for at in range(0, len(buffer), WRITE_SLICE_BYTES)]


def write_from_slices(descriptor: int, slices: list[memoryview], filled: int, offset: int) -> None:
    """The first `filled` bytes of the buffer cut by write_slices, written at `offset`, a slice per write.

    One pwrite per slice and no new view unless a write falls short. The generic loop (pwrite_all per slice) built
    three views and made two calls per 32 KiB: the agent's 2.1 GB download took 2.71 and 2.82 s of CPU with it,
    2.51 and 2.67 s with this one (two A/Bs of 9 interleaved runs, 2 cores, 2026-12-03)."""
    pwrite, size = os.pwrite, WRITE_SLICE_BYTES  # looked up once: this loop runs 32 times per MiB
    for piece in slices:
        if filled < size:  # the last piece: part of a slice, or all of the buffer's shorter last one
            if filled > 0:
                pwrite_all(descriptor, piece[:filled], offset)
            return
        written = pwrite(descriptor, piece, offset)
        if written != size:
            pwrite_all(descriptor, piece[written:], offset + written)
        offset += size
        filled -= size


# An O_DIRECT transfer starts and ends on a multiple of the file's direct-I/O alignment and sits in memory on the
# device's DMA alignment (open(2), "O_DIRECT"). Linux >= 6.1 reports both (statx, STATX_DIOALIGN: 512 on this VM's
# ext4); where it does not, writes are aligned to 4096, the largest logical block of NVMe drives and of md arrays
# built on them, and a refusal (EINVAL) sends the file through the page cache.
DIRECT_ALIGN = 4096
# The download threads' buffers are anonymous mappings: aligned to a page, no more.
PAGE_BYTES = mmap.PAGESIZE


def open_direct(path: Path) -> int | None:
    """A second, write-only descriptor of `path` whose writes bypass the page cache (O_DIRECT); None where the
    filesystem refuses the flag (EINVAL): that file is then written through the page cache alone."""
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return None
        raise


def direct_alignment(reported: DirectIoAlignment | None, buffer_bytes: int) -> int | None:
    """The boundary the agent's direct writes keep to, or None where they cannot be made: the filesystem says it
    does no direct I/O for the file (ext4 with data=journal, inline data, fs-verity), wants memory aligned beyond a
    page, or an offset alignment that the threads' buffers are not a multiple of."""
    if reported is None:  # not reported (Linux < 6.1, or the filesystem keeps it to itself): try the safe one
        return DIRECT_ALIGN
    if not reported.offset or not reported.memory or reported.memory > PAGE_BYTES:
        return None
    align = max(DIRECT_ALIGN, reported.offset)
    return align if buffer_bytes % align == 0 else None


class FileWriter:
    """One downloaded file's writes: whole blocks straight to the disk, the rest through the page cache.

    A buffered write allocates a page-cache page, copies into it and leaves it to be written back, and in the agent's
    1 GiB container every page it writes is charged to it, so a model of hundreds of GB is reclaimed from its own
    limit all the way down (docs/upstream-facts.md). Written with O_DIRECT, whole blocks go from the thread's buffer
    to the device as they arrive, and the sync after publication has only the files' tails, the extents' conversion
    and the device's cache left to flush. What is not a whole block at a block boundary (a file's tail; the head of
    a range that starts between blocks, an upload part of odd size) is a buffered write. One thread writes a file at
    a time: a buffered writer waiting for the inode's lock spins on a CPU, a Python lock's waiters sleep; aligned
    direct writes take that lock shared (ext4 since 6.3, xfs), and letting them overlap gained nothing here
    (3.63 s against 3.41 s for 2.1 GB, 5 runs each)."""

    def __init__(self, descriptor: int, direct: int | None, align: int = DIRECT_ALIGN) -> None:
        self.descriptor, self.direct, self.align = descriptor, direct, align
        self.lock = threading.Lock()
        self.page_cache_bytes = 0  # written through the page cache: the whole file where direct writes are refused

    @classmethod
    def create(cls, path: Path, size: int, buffer_bytes: int) -> FileWriter:
        """`path` made `size` bytes long, blocks allocated (fs.allocate), and opened for both kinds of write."""
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)  # RDWR: MD5 reads back
        try:
            allocate(descriptor, size)
            align = direct_alignment(direct_io_alignment(descriptor), buffer_bytes)
            direct = open_direct(path) if align is not None and size >= align else None
            return cls(descriptor, direct, align or DIRECT_ALIGN)
        except BaseException:
            os.close(descriptor)
            raise

    def head_bytes(self, start: int) -> int:
        """How much of a range starting at `start` goes before the first block boundary (0: none)."""
        return (-start) % self.align if self.direct is not None else 0

    def write(self, buffer: memoryview, slices: list[memoryview], filled: int, offset: int) -> None:
        """The first `filled` bytes of `buffer` (page-aligned, cut by write_slices) written at `offset`."""
        with self.lock:
            aligned = self.direct is not None and offset % self.align == 0
            whole = filled - filled % self.align if aligned else 0
            if whole and not self._write_direct(buffer[:whole], offset):
                whole = 0
            if not whole:
                write_from_slices(self.descriptor, slices, filled, offset)
            elif filled > whole:
                pwrite_all(self.descriptor, buffer[whole:filled], offset + whole)
            self.page_cache_bytes += filled - whole

    def _write_direct(self, data: memoryview, offset: int) -> bool:
        """False where the device refuses the transfer (EINVAL: its logical blocks are larger than the alignment, or
        a write fell short of a block and the rest is misaligned); from then on this file goes through the page
        cache, from `offset` again (what went directly is written again, the same bytes)."""
        direct = self.direct
        assert direct is not None  # write() asks only while there is one
        try:
            pwrite_all(direct, data, offset)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            self.direct = None
            os.close(direct)
            return False
        return True

    def close(self) -> None:
        direct, self.direct = self.direct, None
        try:
            os.close(self.descriptor)
        finally:
            if direct is not None:
                os.close(direct)
