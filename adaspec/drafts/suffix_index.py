"""Incremental n-gram suffix index for the model-free Suffix draft (issue 10).

`SuffixIndex` holds one request's committed tokens t_0..t_n and, for every n-gram length
n = 1..max_ngram, a map from the n tokens ending at position c - 1 to [occurrences, c]: how often
that n-gram occurred and the most recent position c of the token that followed it. A token is
indexed once, when the token after it is committed (the n-grams ending at the newest token have no
continuation yet), so each new token costs `max_ngram` dictionary updates and nothing is ever
rescanned. Memory: at most `max_ngram` entries per token of the request (its context is bounded by
the engine's context limit).

Lookup (`longest`): the longest n-gram (max_ngram down to min_n) that ends the request's context
and occurred before; the continuation copies tokens from just after that occurrence, reading its own
copied tokens when it runs past the end (so a repeating pattern keeps repeating, as in LZ77).

Rewinds (calibration's `restore_request`, engine/fork.py) truncate the token list; entries that
point past the end, or whose n-gram no longer matches the tokens there, are ignored at lookup, so a
rewind costs nothing and can never propose from tokens that are gone.

`GlobalCache`: the outputs of the last N finished requests, each with its own id, indexed the same
way in one shared map; evicting an output removes the entries that still point into it.
"""

from __future__ import annotations

from collections import deque


class SuffixIndex:
    def __init__(self, max_ngram: int = 8):
        self.max_ngram = max_ngram
        self.tokens: list[int] = []
        self.maps: list[dict[tuple, list[int]]] = [dict() for _ in range(max_ngram + 1)]
        self._next = 1  # next continuation position c to index (c >= 1)

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens = []
        self.maps = [dict() for _ in range(self.max_ngram + 1)]
        self._next = 1

    def truncate(self, length: int) -> None:
        """Keep t_0..t_{length-1} (a rewind); length 0 resets."""
        if length <= 0:
            self.reset()
            return
        del self.tokens[length:]
        self._next = min(self._next, max(1, length))

    def extend(self, tokens) -> None:
        toks = self.tokens
        toks.extend(tokens)
        maps, N = self.maps, self.max_ngram
        for c in range(self._next, len(toks)):
            for n in range(1, min(N, c) + 1):
                key = tuple(toks[c - n:c])
                e = maps[n].get(key)
                if e is None:
                    maps[n][key] = [1, c]
                else:
                    e[0] += 1
                    e[1] = c
        self._next = max(self._next, len(toks))

    def longest(self, min_n: int = 2):
        """(n, occurrences, continuation position) of the longest earlier n-gram ending the context, or None."""
        toks = self.tokens
        L = len(toks)
        for n in range(min(self.max_ngram, L - 1), min_n - 1, -1):
            key = tuple(toks[L - n:])
            e = self.maps[n].get(key)
            if e is not None:
                c = e[1]
                if c < L and c >= n and tuple(toks[c - n:c]) == key:  # valid after any rewind
                    return n, e[0], c
        return None

    def continuation(self, c: int, k: int) -> list[int]:
        """k tokens copied from position c on; past the end, the copy reads its own tokens."""
        toks, L = self.tokens, len(self.tokens)
        out: list[int] = []
        for j in range(k):
            src = c + j
            out.append(toks[src] if src < L else out[src - L])
        return out

    def copy_prefix(self, length: int) -> "SuffixIndex":
        """A fresh index of t_0..t_{length-1} (forking a request, engine/fork.py)."""
        other = SuffixIndex(self.max_ngram)
        other.extend(self.tokens[:length])
        return other


class GlobalCache:
    """N-gram index over the outputs of the last `capacity` finished requests."""

    def __init__(self, capacity: int, max_ngram: int = 8):
        self.capacity, self.max_ngram = capacity, max_ngram
        self.outputs: dict[int, list[int]] = {}
        self.order: deque[int] = deque()
        self.maps: list[dict[tuple, list[int]]] = [dict() for _ in range(max_ngram + 1)]
        self._ids = 0

    def __len__(self) -> int:
        return len(self.order)

    def add(self, tokens: list[int]) -> None:
        if self.capacity <= 0 or len(tokens) < 2:
            return
        oid = self._ids
        self._ids += 1
        toks = list(tokens)
        self.outputs[oid] = toks
        self.order.append(oid)
        for c in range(1, len(toks)):
            for n in range(1, min(self.max_ngram, c) + 1):
                key = tuple(toks[c - n:c])
                e = self.maps[n].get(key)
                if e is None:
                    self.maps[n][key] = [1, oid, c]
                else:
                    e[0] += 1
                    e[1], e[2] = oid, c
        while len(self.order) > self.capacity:
            self._evict(self.order.popleft())

    def _evict(self, oid: int) -> None:
        toks = self.outputs.pop(oid)
        for c in range(1, len(toks)):
            for n in range(1, min(self.max_ngram, c) + 1):
                key = tuple(toks[c - n:c])
                e = self.maps[n].get(key)
                if e is not None and e[1] == oid:
                    del self.maps[n][key]

    def longest(self, context: list[int], min_n: int = 2):
        """(n, occurrences, output tokens, continuation position) for the context's longest n-gram, or None."""
        L = len(context)
        for n in range(min(self.max_ngram, L), min_n - 1, -1):
            e = self.maps[n].get(tuple(context[L - n:]))
            if e is not None:
                return n, e[0], self.outputs[e[1]], e[2]
        return None
