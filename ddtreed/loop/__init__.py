"""The middle: the daemon loop and its lifecycle, the wiring, the incident
path, the preflight gate, recovery after ddtreed itself died, promotion.
"""
