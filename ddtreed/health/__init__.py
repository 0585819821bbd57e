"""Is the service up and serving correctly: startup milestones and probes,
verification of a (re)start, the serving watch, the output canary.
"""
