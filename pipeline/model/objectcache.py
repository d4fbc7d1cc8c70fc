"""Every object a frontend has seen, compressed, within a budget of bytes:
what a GET of a key the change-log cache no longer holds reads instead of
ClickHouse. Pure: values and CPU, no I/O (the change-log cache fills it and
says when to train its dictionary).

Reports of one cluster are nearly alike (the same policies, rules and
messages; other names, uids and times), so zstd with a dictionary trained on
the first objects seen keeps a 6-KB Kyverno report in 120-180 bytes, against
about 950 without one: a million reports fit in a few hundred MB, where their
JSON would take 6 GB.

What it holds of a key is the key's latest change at or below the cache's
floor, or, from a read of ClickHouse, a version no older than that. The
change-log cache hands it each change it lets go of (``keep``, ``drop``), in
commit order; reads of ClickHouse ``offer`` what they found, which is taken
only when nothing newer was kept or let go of the key while they read
(``reading``)."""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager

if sys.version_info >= (3, 14):
    from compression.zstd import ZstdCompressor, ZstdDict, decompress, train_dict
else:
    from backports.zstd import ZstdCompressor, ZstdDict, decompress, train_dict

from pipeline.model.cache import Key
from pipeline.model.objects import key_id

#: what Python spends on an entry besides its value's bytes: the key's number,
#: the value's object header, the dict's slot and its spare room, the
#: allocator's rounding. Counted high: 300,000 of the bench's reports took 261
#: bytes of RSS an entry, counted as 314 (with 16-byte keys it was 277)
ENTRY_OVERHEAD = 205
#: objects a dictionary is trained on, and its size
SAMPLES = 1000
DICTIONARY_BYTES = 64 * 1024
LEVEL = 9
_HEADER = struct.Struct("<QB")  # resourceVersion, which compression
_PLAIN, _DICTIONARY = 0, 1


class ObjectCache:
    def __init__(self, budget: int):
        #: most bytes kept (0: nothing is)
        self.budget = budget
        self._entries: dict[int, bytes] = {}
        self._bytes = 0
        self._plain = ZstdCompressor(level=3)
        self._compressor: ZstdCompressor | None = None
        self._dictionary: ZstdDict | None = None
        self._samples: list[bytes] = []
        self._training = False
        #: reads of ClickHouse under way, and (while there are any) the
        #: newest version let go of each key meanwhile
        self._readers = 0
        self._gone: dict[int, int] = {}
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes kept, as the budget counts them."""
        return self._bytes

    @property
    def spent(self) -> bool:
        """Whether the budget was reached: another object lets an older one go."""
        return self.evicted > 0 or self._bytes >= self.budget

    def get(self, key: Key) -> tuple[int, bytes] | None:
        """(resourceVersion, JSON) of the key, if kept."""
        value = self._entries.get(key_id(key))
        if value is None:
            return None
        rv, how = _HEADER.unpack_from(value)
        data = memoryview(value)[_HEADER.size:]
        if how == _DICTIONARY:
            assert self._dictionary is not None
            return rv, decompress(data, zstd_dict=self._dictionary)
        return rv, decompress(data)

    def keep(self, key: Key, rv: int, raw: bytes) -> None:
        """The key's latest change at or below the floor (a create or an update)."""
        if self.budget <= 0:
            return
        digest = key_id(key)
        self._remove(digest)
        self._put(digest, rv, raw)

    def drop(self, key: Key, rv: int) -> None:
        """The key's deletion at resourceVersion ``rv`` went below the floor."""
        digest = key_id(key)
        self._remove(digest)
        self._went(digest, rv)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read of ClickHouse whose rows will be offered."""
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1
            if not self._readers:
                self._gone.clear()

    def offer(self, key: Key, rv: int, raw: bytes) -> None:
        """A version read from ClickHouse (within ``reading``), taken unless
        something as new was kept or let go of meanwhile."""
        if self.budget <= 0:
            return
        digest = key_id(key)
        if self._gone.get(digest, 0) >= rv:
            return
        held = self._entries.get(digest)
        if held is not None:
            if _HEADER.unpack_from(held)[0] >= rv:
                return
            self._remove(digest)
        self._put(digest, rv, raw)

    def samples(self) -> list[bytes] | None:
        """The objects to train a dictionary on, once there are enough and
        none is trained or training; ``use`` the dictionary ``trained`` gives."""
        if self._compressor is not None or self._training or len(self._samples) < SAMPLES:
            return None
        self._training = True
        samples, self._samples = self._samples, []
        return samples

    @staticmethod
    def trained(samples: list[bytes]) -> ZstdDict:
        """A dictionary of ``samples``: CPU-bound for about half a second;
        the caller runs it on a thread (zstd releases the GIL)."""
        return train_dict(samples, DICTIONARY_BYTES)

    def use(self, dictionary: ZstdDict) -> None:
        """Compress with ``dictionary`` from now on; objects kept until then
        stay compressed without one."""
        self._dictionary = dictionary
        self._compressor = ZstdCompressor(level=LEVEL, zstd_dict=dictionary)
        self._training = False

    def _put(self, digest: int, rv: int, raw: bytes) -> None:
        compressor = self._compressor
        if compressor is not None:
            value = _HEADER.pack(rv, _DICTIONARY) + compressor.compress(
                raw, ZstdCompressor.FLUSH_FRAME)
        else:
            if len(self._samples) < SAMPLES and not self._training:
                self._samples.append(raw)
            value = _HEADER.pack(rv, _PLAIN) + self._plain.compress(
                raw, ZstdCompressor.FLUSH_FRAME)
        self._entries[digest] = value
        self._bytes += len(value) + ENTRY_OVERHEAD
        while self._bytes > self.budget and self._entries:
            oldest = next(iter(self._entries))
            self._went(oldest, _HEADER.unpack_from(self._entries[oldest])[0])
            self._remove(oldest)
            self.evicted += 1

    def _went(self, digest: int, rv: int) -> None:
        """A key let go of at ``rv``: remembered while reads are under way,
        so that none brings back an older version."""
        if self._readers:
            self._gone[digest] = max(rv, self._gone.get(digest, 0))

    def _remove(self, digest: int) -> None:
        value = self._entries.pop(digest, None)
        if value is not None:
            self._bytes -= len(value) + ENTRY_OVERHEAD
