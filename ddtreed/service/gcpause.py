"""The crash path's pause of Python's cyclic garbage collector.

From the first diagnosis of crash text to the incident's durable row the daemon allocates a few
thousand objects; a generation-0 pass that falls there (~0.3 ms on the development box, one
detection in three or four) delays the row by its length. `pause()` turns the collector off
for that stretch and `resume()` turns it on again after the row; the service's next pump turn
resumes it too, so a pause whose crash group is judged by another path (the verification
window's) lasts one turn at most. Only a pause of ours is undone: a collector someone else turned
off stays off. Nothing is collected on resume: the next allocation past the threshold does it,
after the row."""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    if not _paused and gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    global _paused
    if _paused:
        _paused = False
        gc.enable()
