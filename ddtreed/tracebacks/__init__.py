"""Turn SGLang output into Crash records: line grammar, streaming assembler, offline helper."""

from .assembler import Assembler, assemble_lines
from .grammar import parse_line

__all__ = ["Assembler", "assemble_lines", "parse_line"]
