"""``randrange(n)`` draws in bulk, bit-identical to drawing them one by one (the bootstrap's inner loop).

``random.Random.randrange(n)`` (one positive argument) is ``_randbelow(n)``: with ``b = n.bit_length()``
it takes ``getrandbits(b)`` — one 32-bit Mersenne Twister word shifted right by ``32 - b`` — until the
value is below ``n``. :class:`Draws` takes the words in blocks (``getrandbits(32·B)``: word ``i`` is bits
``32i…32i+31``) and applies the same rejection, so it yields exactly the indices ``randrange`` would,
in the same order; :meth:`Draws.close` leaves the generator in exactly the state ``randrange`` would
have (the words actually used are drawn again from the saved state). δ's bootstrap (2,000 replicates,
32,000 draws for 16 worlds × 2 trials) is on every run's critical chain and takes ~30 % less CPU
with it (docs/performance/consolidation.md#a-runs-cost-counted).

The block reading relies on CPython's ``getrandbits``; :func:`available` checks it once against
``randrange`` on a seeded generator and callers fall back to ``randrange`` if it differs (or for a
subclass of ``random.Random``, which may override ``getrandbits`` or ``random``).
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Iterator

__all__ = ["Draws", "available"]

BLOCK = 4096
"""Words taken from the generator per block."""


def _words(gen: random.Random, block: int) -> Iterator[int]:
    """The generator's 32-bit words in order, ``block`` at a time."""
    fmt = f"<{block}I"
    while True:
        yield from struct.unpack(fmt, gen.getrandbits(32 * block).to_bytes(4 * block, "little"))


class Draws:
    """``randrange(n)`` of ``gen`` in bulk (module docstring); ``n`` in [1, 2³²). Call :meth:`close`
    when done (it restores the generator's state to that of the draws made)."""

    def __init__(self, gen: random.Random, block: int = BLOCK) -> None:
        self.gen = gen
        self.state = gen.getstate()
        self.used = 0
        """Words used by the draws (a caller that reads :attr:`next` itself sets it before closing)."""
        self.next = _words(gen, block).__next__
        """The generator's next 32-bit word."""

    def below(self, n: int) -> int:
        """The next ``randrange(n)``."""
        shift = 32 - n.bit_length()
        nxt = self.next
        r = nxt() >> shift
        self.used += 1
        while r >= n:
            r = nxt() >> shift
            self.used += 1
        return r

    def close(self) -> None:
        """Put the generator where ``randrange`` would have left it: ``used`` words after the start."""
        self.gen.setstate(self.state)
        if self.used:
            self.gen.getrandbits(32 * self.used)


@functools.cache
def available() -> bool:
    """Whether :class:`Draws` matches ``randrange`` on this interpreter (checked once, seeded)."""
    ref, fast = random.Random(7), random.Random(7)
    sizes = [1, 2, 3, 5, 7, 8, 100, 2**31 + 5] * 25
    want = [ref.randrange(n) for n in sizes]
    draws = Draws(fast, block=16)  # crosses blocks
    got = [draws.below(n) for n in sizes]
    draws.close()
    return got == want and ref.random() == fast.random()
