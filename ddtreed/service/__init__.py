"""The supervised service on its host: the Host seam, launch and stop,
its process tree, one run of it, log rotation, pid file, state lock.
"""
