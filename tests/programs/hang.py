"""A service that hangs forever after its first line; SIGTERM ends it normally."""

import time

print("started; hanging now", flush=True)
while True:
    time.sleep(1)
