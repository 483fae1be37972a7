"""Output kept aside while profiles stream past: spooled items, lines and rendered text."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from typing import IO, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Reported(Protocol[T_co]):
    """What a report reads: iterated (more than once) and counted; a list or a Spooled."""

    def __iter__(self) -> Iterator[T_co]: ...
    def __len__(self) -> int: ...


class Spooled(Generic[T]):
    """Items kept pickled in a temporary file (in memory up to a MB), read back in order: what
    a many-profile command reports at its end, so that its memory does not grow with the
    number of profiles (issue 29 item 2). Appended to and iterated, never indexed."""

    def __init__(self) -> None:
        import tempfile

        # closed with the object: it lives as long as the command's report
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(1 << 20)  # noqa: SIM115
        self._count = 0
        self._end = 0
        self._replaced: dict[int, T] = {}

    def append(self, item: T) -> None:
        import pickle

        self._file.seek(self._end)
        pickle.dump(item, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._end = self._file.tell()
        self._count += 1

    def replace(self, index: int, item: T) -> None:
        """Item INDEX reads back as ITEM from now on."""
        self._replaced[index] = item

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[T]:
        import pickle

        at = 0  # each iterator keeps its own place: loops may nest
        for index in range(self._count):
            self._file.seek(at)
            item = pickle.load(self._file)
            at = self._file.tell()
            yield self._replaced.get(index, item)


class LineSpool(Spooled[str]):
    """Lines to print at the end, in order, kept out of memory."""

    def __iadd__(self, lines: Iterable[str]) -> LineSpool:
        for line in lines:
            self.append(line)
        return self


class Sink(Protocol):
    """Where rendered text goes: kept aside as it comes, delivered all at once or not at all."""

    def add(self, name: str, text: str) -> None: ...
    def commit(self) -> list[str]: ...
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
