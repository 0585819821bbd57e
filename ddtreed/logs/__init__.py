"""Following the service's log files: `Follower` (tail -F with rotation, truncation, bounded lines)
and the inotify directory watch it waits on."""

from .follower import BLOCK_BYTES, MIN_READ_INTERVAL_S, TRUNCATION_MARKER, Follower

__all__ = ["BLOCK_BYTES", "MIN_READ_INTERVAL_S", "TRUNCATION_MARKER", "Follower"]
