"""How ddtreed shows itself to operators: systemd notify and hooks, metrics,
the status snapshot, progress, logging and redaction, unit install.
"""
