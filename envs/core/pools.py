"""Slot values for task generators: real words, pseudo-words and random strings, split by a hash.

A token belongs to the test split iff a stable hash says so, whatever produced it, so a test value can
never be drawn for a train task (disjoint by construction; tests/test_envs_tasks.py checks it on whole
tokens). Thousands of distinct values per split make memorising names useless (docs/learnability.md).
"""
from __future__ import annotations

import hashlib
import random
import re
from functools import lru_cache
from importlib import resources

CONSONANTS = "bdfghklmnprstvz"
VOWELS = "aeiou"
ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
TOKEN = re.compile(r"[A-Za-z0-9]+")


def split_of(token: str) -> str:
    """A quarter of all tokens are test tokens."""
    return "test" if hashlib.blake2b(token.encode(), digest_size=4).digest()[0] % 4 == 0 else "train"


def tokens(text: str) -> list[str]:
    """Whole tokens: maximal alphanumeric runs (so `jasmine_basil` is two tokens, `moose12` one)."""
    return TOKEN.findall(text)


@lru_cache(maxsize=1)
def real_words() -> tuple[str, ...]:
    text = resources.files(__package__).joinpath("data/words.txt").read_text()
    return tuple(w for w in text.split() if w)


class Pools:
    """Draws slot values for one split, never a token of the other split or of the template text."""

    def __init__(self, split: str, stopwords: frozenset[str] = frozenset()):
        if split not in ("train", "test"):
            raise ValueError(f"split must be train or test, not {split!r}")
        self.split = split
        self.stop = stopwords
        self.words = [w for w in real_words() if split_of(w) == split and w not in stopwords]

    def _ok(self, value: str) -> bool:
        return all(split_of(t) == self.split and t.lower() not in self.stop for t in tokens(value))

    def word(self, rng: random.Random) -> str:
        """40% real word, 40% pseudo-word, 20% random alphanumeric (the learnability mix)."""
        r = rng.random()
        if r < 0.4:
            return rng.choice(self.words)
        if r < 0.8:
            return self.pseudo(rng)
        return self.random_string(rng)

    def real(self, rng: random.Random) -> str:
        return rng.choice(self.words)

    def pseudo(self, rng: random.Random) -> str:
        while True:
            n = rng.choice((2, 2, 3))
            w = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(n))
            if rng.random() < 0.4:
                w += rng.choice(CONSONANTS)
            if self._ok(w):
                return w

    def random_string(self, rng: random.Random) -> str:
        while True:
            n = rng.randint(5, 8)
            w = rng.choice("abcdefghijklmnopqrstuvwxyz") + "".join(rng.choice(ALNUM) for _ in range(n - 1))
            if any(c.isdigit() for c in w) and self._ok(w):
                return w

    def stem(self, rng: random.Random) -> str:
        """A file or directory stem: word (50%), word_word (25%) or wordNN (25%)."""
        while True:
            r = rng.random()
            if r < 0.5:
                s = self.word(rng)
            elif r < 0.75:
                s = self.word(rng) + "_" + self.word(rng)
            else:
                s = self.word(rng) + str(rng.randint(2, 99))
            if self._ok(s) and len(s) <= 24:
                return s

    def identifier(self, rng: random.Random) -> str:
        """A Python identifier: a word or word_word, never a keyword or builtin (they are stopwords)."""
        while True:
            s = self.word(rng) if rng.random() < 0.6 else self.word(rng) + "_" + self.word(rng)
            if s[0].isalpha() and self._ok(s):
                return s

    def lines(self, rng: random.Random, n: int) -> list[str]:
        """n lines of one to three words: the text of a workspace file."""
        return [" ".join(self.word(rng) for _ in range(rng.randint(1, 3))) for _ in range(n)]

    def number(self, rng: random.Random, lo: int, hi: int) -> int:
        choices = [n for n in range(lo, hi + 1) if split_of(str(n)) == self.split]
        if not choices:
            raise ValueError(f"no {self.split} number in [{lo}, {hi}]")
        return rng.choice(choices)

    def distinct(self, draw, rng: random.Random, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            v = draw(rng)
            if v not in out:
                out.append(v)
        return out


class PoolsBySplit:
    """An env's Pools, one per split, built on first use (building one filters the whole word list)."""

    def __init__(self, stopwords: frozenset[str]):
        self.stopwords = stopwords
        self._pools: dict[str, Pools] = {}

    def __call__(self, split: str) -> Pools:
        if split not in self._pools:
            self._pools[split] = Pools(split, self.stopwords)
        return self._pools[split]


def vocabulary(*texts: str) -> frozenset[str]:
    """Lower-cased whole tokens of template text: excluded from every pool."""
    return frozenset(t.lower() for text in texts for t in tokens(text))
