from rag.ratelimit import SlidingWindowRateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_allows_up_to_the_limit_then_says_when_to_retry():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(3, clock=clock)
    assert [limiter.allow("a")[0] for _ in range(3)] == [True, True, True]
    clock.now += 10
    allowed, retry_after = limiter.allow("a")
    assert not allowed
    assert retry_after == 50.0  # the first request leaves the window 60 s after it was made


def test_window_slides():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(2, clock=clock)
    limiter.allow("a")
    clock.now += 30
    limiter.allow("a")
    clock.now += 31  # the first request is now older than a minute
    assert limiter.allow("a") == (True, 0.0)
    assert limiter.allow("a")[0] is False


def test_keys_are_independent():
    limiter = SlidingWindowRateLimiter(1, clock=FakeClock())
    assert limiter.allow("a")[0]
    assert limiter.allow("b")[0]
    assert not limiter.allow("a")[0]


def test_refused_requests_are_not_counted():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(1, clock=clock)
    limiter.allow("a")
    for _ in range(10):
        limiter.allow("a")
    clock.now += 60.5
    assert limiter.allow("a")[0]


def test_zero_means_unlimited_and_keeps_no_state():
    limiter = SlidingWindowRateLimiter(0, clock=FakeClock())
    assert all(limiter.allow("a") == (True, 0.0) for _ in range(1000))
    assert len(limiter) == 0


def test_idle_keys_are_evicted_on_sweep():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(5, clock=clock, sweep_every=10)
    for i in range(9):
        limiter.allow(f"client-{i}")
    assert len(limiter) == 9
    clock.now += 61
    limiter.allow("late")  # the 10th call sweeps the nine idle keys
    assert len(limiter) == 1


def test_memory_is_bounded_by_max_keys():
    limiter = SlidingWindowRateLimiter(5, clock=FakeClock(), max_keys=100)
    for i in range(1000):
        limiter.allow(f"client-{i}")
    assert len(limiter) == 100
    # The most recent keys are the ones kept.
    assert limiter.allow("client-999") == (True, 0.0)
