"""A service that dies on every start the way SGLang's ranks do: the founding traceback on TP0 and TP1.

Accepts (and ignores) any SGLang flags, so launch remediations can rewrite its argv and it still
crashes: a fix that never holds. Each start appends a line to $CRASH_LOOP_STARTS when set.
"""

import os
import sys
import time
import traceback


def replay_prepare():
    raise RuntimeError("The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0")


def main() -> int:
    starts = os.environ.get("CRASH_LOOP_STARTS")
    if starts:
        with open(starts, "a") as file:
            file.write(f"{os.getpid()} {' '.join(sys.argv[1:])}\n")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp} TP0] Load weight begin. avail mem=94.10 GB", file=sys.stderr, flush=True)
    try:
        replay_prepare()
    except RuntimeError:
        text = traceback.format_exc()
    for rank in ("TP0", "TP1"):
        sys.stderr.write(f"[{stamp} {rank}] Scheduler hit an exception: {text}")
    sys.stderr.flush()
    return 1


if __name__ == "__main__":
    sys.exit(main())
