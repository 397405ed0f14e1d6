"""Seeds derived from what a draw is about, never from where or when it runs.

A seed is a hash of its parts (run seed, step, slot, sample key, micro-batch, data-parallel index …),
so it is the same on every machine, after a resume and at any placement, and different for every
distinct tuple of parts. Python's `hash` is salted per process and `random` state is global: neither
gives that.
"""

from __future__ import annotations

import hashlib


def seed_of(*parts: int | str) -> int:
    """A 31-bit seed (fits every RNG's seed argument) from `parts`, joined as text with `|`."""
    digest = hashlib.blake2b("|".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF
