"""A service that crashes at once with a traceback, every time it is started."""

import sys

print("[2026-01-01 00:00:00] Load weight begin.", file=sys.stderr, flush=True)
raise RuntimeError("The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0")
