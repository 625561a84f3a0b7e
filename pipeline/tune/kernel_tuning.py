"""Tune each kernel item that the cache does not answer, and record it there: a second run on
the same GPU and sources measures nothing. The cache is saved after every item, so a run that
stops half-way keeps what it tuned."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.specs.tune import AnnealOptions
from pipeline.tune.annealer import Annealer
from pipeline.tune.baselines import ListSearch, RandomSearch
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.search_result import SearchResult
from pipeline.tune.search_space import SearchSpace
from pipeline.tune.tuning_cache import CacheEntry, TuningCache

log = logging.getLogger(__name__)
STRATEGIES = ("anneal", "random", "autotune_list")


@dataclass
class ItemResult:
    item: KernelItem
    cached: CacheEntry | None  # answered by the cache: nothing measured
    search: SearchResult | None = None
    error: str | None = None  # the default failed its own gate, or the space refused

    def to_dict(self) -> dict:
        item = self.item
        out = {
            "item": f"{item.kernel} [{item.label}]",
            "kernel": item.kernel,
            "shape": item.key,
            "label": item.label,
        }
        if self.error:
            return {**out, "error": self.error, "num_trials": 0}
        if self.cached is not None:
            c = self.cached
            return {
                **out,
                "cached": True,
                "default": c.default_config,
                "tuned": c.config,
                "default_ms": c.default_ms,
                "tuned_ms": c.tuned_ms,
                "num_trials": 0,
            }
        search = self.search.to_dict()
        search["default_ms"], search["tuned_ms"] = search["default_cost"], search["tuned_cost"]
        return {**out, "cached": False, **search}


def strategy_for(name: str, options: AnnealOptions, space: SearchSpace, clock):
    if name == "anneal":
        return Annealer(options, clock)
    if name == "random":
        return RandomSearch(options, clock)
    if name == "autotune_list":
        return ListSearch(options, space.autotune_list(), clock)
    raise ValueError(f"tune.kernels.strategy={name!r}; use one of {STRATEGIES}")


def tune_items(
    items: list[KernelItem],
    cache: TuningCache,
    make_space: Callable[[KernelItem], SearchSpace],
    options: AnnealOptions,
    strategy: str = "anneal",
    source_hash: Callable[[str], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[ItemResult]:
    from pipeline.engine.kernels.toolchain import source_hash as kernel_source_hash

    source_hash = source_hash or kernel_source_hash
    results = []
    for item in items:
        digest = source_hash(item.kernel)
        entry = cache.get(item.kernel, item.key, digest)
        if entry is not None:
            log.info("tune: %s [%s]: cached (%s)", item.kernel, item.label, entry.config)
            results.append(ItemResult(item, entry))
            continue
        space = make_space(item)
        try:
            search = strategy_for(strategy, options, space, clock).run(space)
        except ValueError as exc:  # the default fails its own gate: report, tune the rest
            log.error("tune: %s [%s]: %s", item.kernel, item.label, exc)
            results.append(ItemResult(item, None, error=str(exc)))
            continue
        cache.put(
            CacheEntry(
                kernel=item.kernel,
                shape=item.key,
                source_hash=digest,
                config=search.tuned,
                default_config=search.default,
                default_ms=search.default_cost,
                tuned_ms=search.tuned_cost,
                strategy=strategy,
                num_trials=len(search.trials),
            )
        )
        cache.save()
        log.info(
            "tune: %s [%s]: %.4f -> %.4f ms in %d trials (%s)",
            item.kernel,
            item.label,
            search.default_cost,
            search.tuned_cost,
            len(search.trials),
            search.tuned,
        )
        results.append(ItemResult(item, None, search))
    return results
