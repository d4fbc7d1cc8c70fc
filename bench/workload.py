"""What the benchmark writes: its Pods (which of the sample's rules each
fails) and the mix of traffic. The reports themselves are
``reportsamples.reports``'. Pure."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import ClassVar

from reportsamples.reports import Resource, sample_results

POLR_PATH = "/apis/wgpolicyk8s.io/v1alpha2"
EPHR_PATH = "/apis/reports.kyverno.io/v1"


def resources(count: int, namespaces: int, *, prefix: str, rng: random.Random
              ) -> list[Resource]:
    """``count`` Pods spread round-robin over ``namespaces`` namespaces."""
    out = []
    for i in range(count):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        ns = f"{prefix}-{i % namespaces:03d}"
        out.append(Resource(ns, f"pod-{i:06d}-{uid[:5]}", uid, random_failing(rng)))
    return out


def random_failing(rng: random.Random) -> frozenset[int]:
    """Most Pods pass; some fail a few rules, as in a real cluster."""
    n = len(sample_results())
    k = rng.choices((0, 1, 2, 3, 5), weights=(50, 20, 15, 10, 5))[0]
    return frozenset(rng.sample(range(n), k))


def flip(failing: frozenset[int], rng: random.Random) -> frozenset[int]:
    """A background scan finding one rule's result changed."""
    return failing ^ {rng.randrange(len(sample_results()))}


@dataclass(frozen=True)
class Mix:
    """Proportions of traffic kinds: each step of an admission (create the
    EphemeralReport, merge it into the PolicyReport, delete it), an in-place
    background-scan update, or a read (a get or a namespace list)."""

    admission: float = 50
    background: float = 40
    read: float = 10
    kinds: ClassVar[tuple[str, ...]] = ("admission", "background", "read")

    @classmethod
    def parse(cls, text: str) -> Mix:
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name not in ("admission", "background", "read"):
                raise ValueError(f"bad mix entry {part!r}: use admission=N,background=N,read=N")
            try:
                values[name] = float(value)
            except ValueError:
                raise ValueError(f"bad mix weight {value!r}") from None
            if values[name] < 0:
                raise ValueError(f"mix weight of {name} is negative")
        mix = cls(**values)
        if mix.admission + mix.background <= 0:
            raise ValueError("the mix must contain writes (admission or background)")
        return mix

    def choose(self, rng: random.Random) -> str:
        return rng.choices(self.kinds, weights=(self.admission, self.background, self.read))[0]

    def __str__(self) -> str:
        return f"admission={self.admission:g},background={self.background:g},read={self.read:g}"
