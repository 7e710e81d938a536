"""kernels.paired: the benchmarks' ratio of two implementations and whether a run can tell them apart."""

from kernels.paired import paired_ratio


def test_the_median_of_the_rounds_ratios_cancels_drift_between_rounds():
    # The machine slows down 3x over the run, both implementations alike: the ratio stays 2.
    ours = [1.0, 1.5, 2.0, 2.5, 3.0]
    theirs = [2 * t for t in ours]
    assert paired_ratio(theirs, ours) == (2.0, 2.0, 2.0)


def test_the_interval_holds_1_only_where_the_run_cannot_tell_the_two_apart():
    ours = [1.0] * 9
    apart = paired_ratio([1.10, 1.12, 1.08, 1.11, 1.09, 1.13, 1.10, 1.07, 1.12], ours)
    assert 1 < apart[1] <= apart[0] <= apart[2]
    noisy = paired_ratio([0.90, 1.15, 0.97, 1.20, 0.85, 1.05, 0.95, 1.10, 0.99], ours)
    assert noisy[1] < 1 < noisy[2] and noisy[0] == 0.99
    assert paired_ratio([0.90, 1.15, 0.97, 1.20, 0.85, 1.05, 0.95, 1.10, 0.99], ours) == noisy  # seeded
