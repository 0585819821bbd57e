"""Command group placeholder: its owner replaces this module with real commands."""


def register(commands) -> None:
    return None
