"""The demo's tiny deterministic language model, its drafter, and the DDTree draft tree.

The target is a bigram table: the next token depends only on the current one, so greedy
output is reproducible anywhere and speculative decoding must reproduce it exactly.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

WORDS = (
    "the", "model", "drafts", "a", "tree", "of", "tokens", "and", "verifies", "them", "in", "one",
    "pass", "over", "graph", "buffers", "that", "were", "captured", "at", "fixed", "width", "so",
    "every", "request", "must", "fit", "its", "slot", "or", "fail", "loudly", "while", "quiet",
    "errors", "hide", "behind", "healthy", "answers", "until", "canary", "compares", "outputs",
    "with", "golden", "text", "from", "trusted", "runs", "paris", "is", "capital", "france",
    "city", "light", "river", "seine", "flows", "through", "old", "streets", "near", "towers", "end",
)
VOCAB_SIZE = len(WORDS)
assert VOCAB_SIZE == 64, "the target table and the tests assume 64 tokens"
_INDEX = {word: index for index, word in enumerate(WORDS)}


def encode(text: str) -> list[int]:
    """Words to token ids; unknown words hash into the vocabulary. Never empty."""
    ids = [_INDEX.get(word, zlib.crc32(word.encode()) % VOCAB_SIZE)
           for word in text.lower().replace(".", " ").replace(",", " ").split()]
    return ids or [0]


def decode(ids: list[int]) -> str:
    return " ".join(WORDS[i % VOCAB_SIZE] for i in ids)


def target_next(token: int) -> int:
    """The target's greedy next token (37 is odd, so this walks one long cycle over the vocabulary)."""
    return (token * 37 + 11) % VOCAB_SIZE


def draft_choices(token: int, width: int, collapse: bool = False) -> list[int]:
    """The drafter's top-`width` guesses after `token`: right except after every fourth token.

    `collapse` makes every guess wrong: output stays correct, acceptance falls to 1.
    """
    right = target_next(token)
    if collapse:
        return [(right + 1 + rank) % VOCAB_SIZE for rank in range(width)]
    first = (right + 1) % VOCAB_SIZE if token % 4 == 0 else right
    others = [right] if first != right else []
    others += [(right + 2 + rank) % VOCAB_SIZE for rank in range(width)]
    return ([first] + others)[:width]


@dataclass(frozen=True)
class DraftTree:
    """Root at position 0, the drafter's main chain at 1..depth, sibling guesses after it."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]  # position of each node's parent (-1 for the root)
    depth: int


def build_tree(root: int, block_size: int, budget: int, collapse: bool = False) -> DraftTree:
    """A tree of exactly `budget` nodes under `root` (budget + 1 tokens to verify)."""
    depth = max(1, min(block_size - 1, budget))
    tokens, parents = [root], [-1]
    previous = root
    for _ in range(depth):
        tokens.append(draft_choices(previous, 1, collapse)[0])
        parents.append(len(tokens) - 2)
        previous = tokens[-1]
    rank = 1
    while len(tokens) < budget + 1:
        # Siblings of chain node d (parent position d), best guesses first, shallow depths first.
        for parent in range(depth):
            if len(tokens) >= budget + 1:
                break
            tokens.append(draft_choices(tokens[parent], rank + 1, collapse)[rank])
            parents.append(parent)
        rank += 1
    return DraftTree(tuple(tokens), tuple(parents), depth)


def chain_tree(root: int, block_size: int, collapse: bool = False) -> DraftTree:
    """DFlash: a plain block of block_size tokens (root + block_size - 1 guesses)."""
    return build_tree(root, block_size, block_size - 1, collapse)


def accept(tree: DraftTree, predictions: list[int], verify: bool = True) -> list[int]:
    """Tokens this verify step emits: the accepted path plus the target's bonus token.

    `verify=False` trusts the drafter's chain blindly: the silent-corruption fault.
    """
    if not verify:
        return list(tree.tokens[1:tree.depth + 1]) + [predictions[tree.depth]]
    emitted, position = [], 0
    while True:
        wanted = predictions[position]
        child = next((index for index in range(1, len(tree.tokens))
                      if tree.parents[index] == position and tree.tokens[index] == wanted), None)
        if child is None:
            return emitted + [wanted]
        emitted.append(wanted)
        position = child
