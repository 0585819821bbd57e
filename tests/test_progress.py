"""Issue 17.3: progress helpers on real SGLang 0.5.16 log lines (shared/real-sglang/logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtreed import progress

REAL_LOGS = Path("/work/shared/real-sglang/logs")
DECODE = ("[2026-12-01 07:52:41] Decode batch, #running-req: 1, #token: 258, token usage: 0.00, accept len: 4.97, "
          "accept rate: 0.36, cuda graph: True, gen throughput (token/s): 1860.69, #queue-req: 0")


def test_decode_lines_and_answered_requests_are_signs_of_life():
    signals = progress.ServingSignals()
    assert not signals.feed(["[2026-12-01] Load weight begin", '"GET /health HTTP/1.1" 503 Service Unavailable'], 1.0)
    assert signals.last_seen_at is None
    assert signals.feed(['INFO:     127.0.0.1:42354 - "GET /health HTTP/1.1" 200 OK'], 2.0)
    assert signals.last_seen_at == 2.0 and signals.accept_length is None
    assert signals.feed([DECODE], 3.0)
    assert (signals.last_seen_at, signals.accept_length) == (3.0, 4.97)


@pytest.mark.skipif(not (REAL_LOGS / "ngram.log").exists(), reason="needs the shared real SGLang logs")
def test_a_real_serving_log_keeps_last_healthy_fresh():
    signals = progress.ServingSignals()
    lines = (REAL_LOGS / "ngram.log").read_text(errors="replace").splitlines()
    assert signals.feed(lines, 10.0)
    assert signals.accept_length is not None and signals.accept_length > 1.0


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
