import math
import uuid

import pytest

from rag.telemetry import TelemetrySampler


def request_ids(n: int) -> list[str]:
    # uuid4-shaped ids like the runtime's, reproducible from the index.
    return [uuid.UUID(int=i * 0x9E3779B97F4A7C15 % (1 << 128), version=4).hex for i in range(n)]


def test_rate_0_3_samples_30_percent_within_three_sigma():
    sampler = TelemetrySampler(0.3)
    n = 10_000
    sampled = sum(sampler.check(request_id) for request_id in request_ids(n))
    sigma = math.sqrt(n * 0.3 * 0.7)
    assert abs(sampled - 0.3 * n) <= 3 * sigma
    stats = sampler.stats()
    assert (stats.sample_rate, stats.total_checks, stats.sampled_count) == (0.3, n, sampled)
    assert stats.actual_rate == pytest.approx(sampled / n)


def test_the_same_request_id_gets_the_same_decision_in_every_worker():
    ids = request_ids(2_000)
    one, other = TelemetrySampler(0.3), TelemetrySampler(0.3)
    first = [one.check(request_id) for request_id in ids]
    assert [one.check(request_id) for request_id in ids] == first
    assert [other.decide(request_id) for request_id in ids] == first


def test_decide_asks_again_without_counting():
    sampler = TelemetrySampler(0.5)
    sampler.decide("abc")
    assert sampler.stats().total_checks == 0
    assert sampler.stats().actual_rate == 0.0


@pytest.mark.parametrize(("rate", "expected"), [(0.0, 0), (1.0, 500)])
def test_rates_zero_and_one_are_exact(rate, expected):
    sampler = TelemetrySampler(rate)
    assert sum(sampler.check(request_id) for request_id in request_ids(500)) == expected


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_a_rate_outside_zero_to_one_is_refused(rate):
    with pytest.raises(ValueError, match="sample_rate"):
        TelemetrySampler(rate)


def test_a_new_rate_applies_to_the_next_checks_and_the_counters_keep_counting():
    sampler = TelemetrySampler(1.0)
    ids = request_ids(10_000)
    assert all(sampler.check(request_id) for request_id in ids[:1_000])

    assert sampler.set_rate(0.1) is True

    n = len(ids) - 1_000
    sampled = sum(sampler.check(request_id) for request_id in ids[1_000:])
    assert abs(sampled - 0.1 * n) <= 3 * math.sqrt(n * 0.1 * 0.9)
    assert [sampler.decide(request_id) for request_id in ids[1_000:1_100]] == [
        TelemetrySampler(0.1).decide(request_id) for request_id in ids[1_000:1_100]
    ]
    stats = sampler.stats()
    assert (stats.sample_rate, stats.total_checks, stats.sampled_count) == (0.1, 10_000, 1_000 + sampled)


def test_setting_the_same_rate_again_changes_nothing():
    sampler = TelemetrySampler(0.3)
    assert sampler.set_rate(0.3) is False
    assert sampler.stats().sample_rate == 0.3


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan])
def test_a_new_rate_outside_zero_to_one_is_refused_and_the_old_one_stays(rate):
    sampler = TelemetrySampler(0.3)
    with pytest.raises(ValueError, match="sample_rate"):
        sampler.set_rate(rate)
    assert sampler.sample_rate == 0.3
