"""Issue 17.3: the progress texts `status` and the log show."""

from __future__ import annotations

from ddtreed.ops import progress


def test_startup_and_watch_texts():
    shown = progress.startup("loading weights", 42.4, 1800.0)
    assert shown["text"] == "starting: loading weights, 42 s of 30 min 00 s" and shown["elapsed_s"] == 42.4
    watch = progress.watching(60.0, until_epoch=1000.0, now=958.0)
    assert watch["text"] == "healthy; watching 60 s for recurrence, 42 s left"


def test_ticker_is_due_every_interval():
    now = [0.0]
    ticker = progress.Ticker(5.0, clock=lambda: now[0])
    assert ticker.due() and not ticker.due()
    now[0] = 4.9
    assert not ticker.due()
    now[0] = 5.0
    assert ticker.due()
