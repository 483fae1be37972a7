"""Output kept aside while profiles stream past: spooled items, lines and rendered text."""

from __future__ import annotations

import contextlib
import marshal
import shutil
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Reported(Protocol[T_co]):
    """What a report reads: iterated (more than once) and counted; a list or a Spooled."""

    def __iter__(self) -> Iterator[T_co]: ...
    def __len__(self) -> int: ...


class Spooled(Generic[T]):
    """Items kept in a temporary file (in memory up to a MB), read back in order: what a
    many-profile command reports at its end, so that its memory does not grow with the number
    of profiles (issue 29 item 2). Appended to and iterated, never indexed. Each item is
    pickled, or with ENCODE and DECODE written as ENCODE makes it (str, int, None and tuples
    of them) by marshal, several times cheaper than pickling an object and its classes."""

    def __init__(
        self, encode: Callable[[T], Any] | None = None, decode: Callable[[Any], T] | None = None
    ) -> None:
        import tempfile

        # closed with the object: it lives as long as the command's report
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(1 << 20)  # noqa: SIM115
        self._count = 0
        self._end = 0
        self._encode, self._decode = encode, decode

    def __del__(self) -> None:
        # The file goes with the object; closed here, not left open to its own finalizer,
        # which warns (ResourceWarning: Unclosed file), an error under the tests' settings.
        self._file.close()

    def append(self, item: T) -> None:
        if self._encode is None:
            import pickle

            data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            data = marshal.dumps(self._encode(item))
        self._file.seek(self._end)
        self._file.write(len(data).to_bytes(4, "little") + data)
        self._end += 4 + len(data)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[T]:
        if self._decode is None:
            import pickle

            load: Callable[[bytes], T] = pickle.loads
        else:  # no pickle imported (render's lines: ~5 M instructions a start)
            decode = self._decode
            load = lambda data: decode(marshal.loads(data))  # noqa: E731
        at = 0  # each iterator keeps its own place: loops may nest
        for _ in range(self._count):
            self._file.seek(at)
            size = int.from_bytes(self._file.read(4), "little")
            data = self._file.read(size)
            at += 4 + size
            yield load(data)


class Names:
    """Names met so far, in order, 8 bytes each: their hashes in an array, and a Bloom filter
    (two bits a name, 64 bits a name) that answers most first meetings without a search, so
    that a call with 100,000 profiles keeps about 2 MB instead of a set of 100,000 strings
    (issue 29 item 2). Two names can share a hash (about 2**-64 a pair): `add` gives the
    position of the first earlier name with its hash, for the caller to confirm."""

    def __init__(self) -> None:
        self._hashes = array("q")
        self._bits = bytearray(1 << 10)
        self._sorted: array[int] | None = None

    def __len__(self) -> int:
        return len(self._hashes)

    def _probes(self, value: int) -> tuple[int, int]:
        mask = len(self._bits) * 8 - 1
        return value & mask, (value >> 32) & mask

    def _marked(self, value: int) -> bool:
        return all(self._bits[p >> 3] & (1 << (p & 7)) for p in self._probes(value))

    def _mark(self, value: int) -> None:
        for p in self._probes(value):
            self._bits[p >> 3] |= 1 << (p & 7)

    def add(self, name: str) -> list[int]:
        """Record NAME; the position (in the order added) of the first earlier name with its
        hash, if any (a search in C, from the start: a name repeated many times is found at
        once)."""
        value = hash(name)
        earlier = []
        if self._marked(value):
            with contextlib.suppress(ValueError):  # the filter's false positive: no such hash
                earlier.append(self._hashes.index(value))
        self._hashes.append(value)
        self._sorted = None
        if len(self._hashes) * 64 > len(self._bits) * 8:  # grown: a filter twice the size
            self._bits = bytearray(len(self._bits) * 2)
            for h in self._hashes:
                self._mark(h)
        else:
            self._mark(value)
        return earlier

    def __contains__(self, name: object) -> bool:
        """Whether NAME (or a name with its hash) was added; a sorted copy is searched."""
        if self._sorted is None:
            self._sorted = array("q", sorted(self._hashes))
        value = hash(name)
        at = bisect_left(self._sorted, value)
        return at < len(self._sorted) and self._sorted[at] == value


class LineSpool(Spooled[str]):
    """Lines to print at the end, in order, kept out of memory."""

    def __init__(self) -> None:
        super().__init__(str, str)

    def __iadd__(self, lines: Iterable[str]) -> LineSpool:
        for line in lines:
            self.append(line)
        return self


class Sink(Protocol):
    """Where rendered text goes: kept aside as it comes, delivered all at once or not at all."""

    def add(self, name: str, text: str) -> None: ...
    def commit(self) -> Iterable[str]: ...
    def discard(self) -> None: ...


class Spool:
    """Text for one stream, joined by sep, kept in a temporary file past a few MB, so that
    nothing reaches the stream unless every profile rendered."""

    def __init__(self, stream: IO[str], sep: str) -> None:
        import tempfile

        self.stream = stream
        self.sep = sep
        # closed by commit or discard, which render_all always reaches
        self.buffer: IO[str] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
            8 << 20, mode="w+", encoding="utf-8"
        )
        self.count = 0

    def add(self, name: str, text: str) -> None:
        self.buffer.write((self.sep if self.count else "") + text)
        self.count += 1

    def commit(self) -> list[str]:
        self.buffer.seek(0)
        shutil.copyfileobj(self.buffer, self.stream)
        self.buffer.close()
        return []

    def discard(self) -> None:
        self.buffer.close()
