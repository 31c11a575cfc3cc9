"""Acceptance counters of speculative rounds (R-I2), as PRIOR_ART.md §5.1 defines them.

A *draft* is one request in one round that verified L >= 1 draft tokens and accepted m of them.
- acceptance rate = sum(m) / sum(L)
- mean acceptance length = 1 + sum(m) / drafts (tokens committed per verify, incl. the bonus or
  replacement token)
- per-position acceptance a_i = (drafts with m >= i) / (drafts with L >= i): the unconditional
  survival of position i among the drafts that verified it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecStats:
    drafts: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verified_at: list[int] = field(default_factory=list)  # [i-1]: drafts with L >= i
    accepted_at: list[int] = field(default_factory=list)  # [i-1]: drafts with m >= i

    def observe(self, verify_lens: list[int], num_accepted: list[int]) -> None:
        for L, m in zip(verify_lens, num_accepted):
            if L == 0:
                continue
            self.drafts += 1
            self.drafted_tokens += L
            self.accepted_tokens += m
            while len(self.verified_at) < L:
                self.verified_at.append(0)
                self.accepted_at.append(0)
            for i in range(L):
                self.verified_at[i] += 1
                self.accepted_at[i] += i < m

    def summary(self) -> dict:
        return {
            "drafts": self.drafts,
            "acceptance_rate": round(self.accepted_tokens / self.drafted_tokens, 4) if self.drafted_tokens else None,
            "mean_acceptance_length": round(1 + self.accepted_tokens / self.drafts, 4) if self.drafts else None,
            "per_position_acceptance": [round(a / v, 4) for a, v in zip(self.accepted_at, self.verified_at)],
        }
