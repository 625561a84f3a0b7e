"""Search spaces with known optima, measured on a fake clock: what the annealer tests run on."""

import random

from pipeline.tune.search_space import Grid, Knob


class FakeClock:
    """Seconds advance only when a measurement runs (one per repeat)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Bowl:
    """cost = 1 + (x - X)^2 + (y - Y)^2 on a 32 x 32 grid, times (1 + noise): optimum (X, Y).
    `refuse(settings)`: a correctness gate that fails those settings."""

    name = "bowl"

    def __init__(self, clock=None, optimum=(23, 7), noise=0.02, seed=0, refuse=None):
        self.grid = Grid([Knob.with_default(name, range(32), 0) for name in ("x", "y")])
        self.optimum = optimum
        self.noise = noise
        self.rng = random.Random(seed)
        self.clock = clock or FakeClock()
        self.refuse = refuse or (lambda settings: False)
        self.measured: list[dict] = []  # every candidate measured, in order

    def initial(self):
        return self.grid.initial()

    def neighbour(self, candidate, rng):
        return self.grid.neighbour(candidate, rng)

    def sample(self, rng):
        return self.grid.sample(rng)

    def describe(self, candidate):
        return self.grid.describe(candidate)

    def true_cost(self, candidate) -> float:
        x, y = candidate
        return 1.0 + (x - self.optimum[0]) ** 2 + (y - self.optimum[1]) ** 2

    def check(self, candidate):
        return "wrong outputs" if self.refuse(self.describe(candidate)) else None

    def measure(self, candidate, repeats):
        self.measured.append(self.describe(candidate))
        costs = []
        for _ in range(repeats):
            self.clock.now_s += 1.0
            costs.append(self.true_cost(candidate) * (1 + self.rng.gauss(0, self.noise)))
        return costs


class Wobble(Bowl):
    """A shallow slope (1% a step towards x = 31) under a deterministic +-10% wobble: no single
    step clears the noise band of three samples."""

    name = "wobble"

    def true_cost(self, candidate) -> float:
        return 1.0 - 0.01 * candidate[0]

    def measure(self, candidate, repeats):
        self.measured.append(self.describe(candidate))
        self.clock.now_s += repeats
        cost = self.true_cost(candidate)
        return [cost * (1 + 0.1 * ((i % 3) - 1)) for i in range(repeats)]
