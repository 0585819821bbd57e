"""A service whose interpreter lacks sglang: what `python -m sglang.launch_server` prints, then exit 1.

The failure of issue 17.2: no rule knows it, it happens on every start, and only the service's
own stderr says why.
"""

import sys
import time

sys.stdout.write("starting the server\n")
sys.stdout.flush()
sys.stderr.write(
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 189, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 112, in _get_module_details\n'
    "ModuleNotFoundError: No module named 'sglang'\n")
sys.stderr.flush()
if "--linger" in sys.argv:  # interpreter teardown on a loaded host: the exit comes a moment later
    time.sleep(float(sys.argv[sys.argv.index("--linger") + 1]))
sys.exit(1)
