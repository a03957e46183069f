"""Thread-safe counters of calls, retries, cache hits, tokens and cost."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass
class UsageSnapshot:
    requests: int = 0
    """HTTP requests sent (every attempt, retries included)."""
    completed: int = 0
    """calls that returned a validated reply from the endpoint"""
    cache_hits: int = 0
    retries: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    timeouts: int = 0
    invalid_replies: int = 0
    connection_errors: int = 0
    """attempts that reached no server (refused, unresolvable, reset)"""
    failures: int = 0
    """calls given up after all retries"""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        out = asdict(self)
        out["cost_usd"] = round(self.cost_usd, 6)
        return out

    def minus(self, earlier: UsageSnapshot) -> UsageSnapshot:
        """The usage between ``earlier`` and this snapshot."""
        a, b = asdict(self), asdict(earlier)
        return UsageSnapshot(**{k: a[k] - b[k] for k in a})

    def summary(self) -> str:
        return (
            f"{self.completed} call(s), {self.cache_hits} cached, {self.retries} retried, "
            f"{self.failures} failed; tokens {self.prompt_tokens} in / "
            f"{self.completion_tokens} out; cost ${self.cost_usd:.4f}"
        )


@dataclass
class UsageCounter:
    """Prices are per million tokens (input, output); 0 means unknown/free."""

    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    _totals: UsageSnapshot = field(default_factory=UsageSnapshot)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self._totals, name, getattr(self._totals, name) + value)

    def add_tokens(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Count tokens of one completed call; return its cost."""
        cost = (
            prompt_tokens * self.price_input_per_mtok
            + completion_tokens * self.price_output_per_mtok
        ) / 1e6
        with self._lock:
            self._totals.prompt_tokens += prompt_tokens
            self._totals.completion_tokens += completion_tokens
            self._totals.cost_usd += cost
        return cost

    def snapshot(self) -> UsageSnapshot:
        with self._lock:
            return UsageSnapshot(**asdict(self._totals))
