"""A service that floods stdout: argv LINES LINE_BYTES, then waits to be stopped."""

import sys
import time

lines, width = int(sys.argv[1]), int(sys.argv[2])
line = ("x" * (width - 1) + "\n").encode()
out = sys.stdout.buffer
for number in range(lines):
    out.write(line)
    if number % 100 == 0:
        out.flush()
        time.sleep(0.001)  # give the supervisor's poll a chance to rotate mid-flood
out.write(b"flood done\n")
out.flush()
while True:
    time.sleep(1)
