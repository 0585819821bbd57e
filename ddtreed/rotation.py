"""Size-based log rotation, one algorithm for every host: path -> path.1 -> … -> path.N.

The host supplies the file operations (`os` locally, SFTP and `cp` over SSH); the order of the
steps, which decides what survives a crash halfway, lives here once.
"""

from __future__ import annotations

from typing import Protocol


class RotationFiles(Protocol):
    def size(self, path: str) -> int | None: ...  # None: no such file

    def exists(self, path: str) -> bool: ...

    def rename(self, source: str, target: str) -> None: ...

    def copy(self, source: str, target: str) -> None: ...

    def truncate(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...


def rotate(files: RotationFiles, path: str, backups: int, over_bytes: int | None,
           copy_truncate: bool) -> bool:
    """Rotate `path` when it is non-empty (and larger than `over_bytes`); True when it rotated.

    copy_truncate keeps the inode a running writer appends to (O_APPEND: it continues at 0). Lines
    written between the copy and the truncate are lost: the price of not owning the writer's file
    descriptor.
    """
    size = files.size(path)
    if not size or (over_bytes is not None and size <= over_bytes):
        return False
    if backups <= 0:
        files.truncate(path) if copy_truncate else files.remove(path)
        return True
    for index in range(backups - 1, 0, -1):
        if files.exists(f"{path}.{index}"):
            files.rename(f"{path}.{index}", f"{path}.{index + 1}")
    if copy_truncate:
        files.copy(path, f"{path}.1")
        files.truncate(path)
    else:
        files.rename(path, f"{path}.1")
    return True
