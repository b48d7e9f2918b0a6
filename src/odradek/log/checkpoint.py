"""Small text checkpoint files, replaced atomically so a crash leaves the old or the new one."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write tmp, fsync it, rename over path, fsync the directory (Kafka's CheckpointFile)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions in directory durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_offset(path: Path) -> int | None:
    """The single integer stored by write_offset, or None if the file is missing or unreadable."""
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_offset(path: Path, offset: int) -> None:
    write_atomic(path, f"{offset}\n")


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset from Kafka's OffsetCheckpointFile format (a version line
    "0", a count line, then `topic partition offset` lines); empty if the file is missing."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    body = "".join(f"{topic} {partition} {offset}\n"
                   for (topic, partition), offset in sorted(offsets.items()))
    write_atomic(path, f"0\n{len(offsets)}\n{body}")
