"""Per-position noise for seeded requests: the same tokens with or without speculation (R-B5, R-B3).

A request with `seed` draws the sampling noise of the row that samples absolute position p from
a generator seeded by (seed, p) and nothing else. The token sampled at p is then a function of
the prefix and (seed, p) alone -- not of how rows are grouped into rounds, how many draft tokens
a round verifies, which requests share the batch, or whether a row was sampled before and thrown
away by a rejection. Point-mass verification accepts a draft token exactly when the target's own
sample equals it (sampling/verify.py), so every committed token is the one plain decoding samples
at that position: seeded speculative output equals seeded plain output token for token, for any
algorithm and adaptive mode. Positions use fresh, independent noise, so the target distribution
is kept exactly as with one generator per request.
"""

from __future__ import annotations

import torch

_MASK = (1 << 64) - 1


def position_seed(seed: int, position: int) -> int:
    """A well-mixed 64-bit seed for (request seed, absolute position) (splitmix64 finaliser)."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + int(position) * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def position_generator(seed: int, position: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of the row that samples `position` of a request seeded with `seed`."""
    return torch.Generator(device=device).manual_seed(position_seed(seed, position))


def row_generators(seeds: list[int | None], positions: list[int], device) -> list[torch.Generator | None]:
    """One generator per sampled row (None for unseeded requests, which use the engine's RNG)."""
    return [None if s is None else position_generator(s, p, device) for s, p in zip(seeds, positions)]


__all__ = ["position_seed", "position_generator", "row_generators"]
