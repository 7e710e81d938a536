"""The ratio of two implementations timed in the same rounds, with its noise.

Each round times both within seconds, so the machine's drift between rounds
cancels in that round's ratio. The median of the rounds' ratios says how far
apart the two are; its 95% bootstrap interval says whether this run can tell
them apart at all (an interval that holds 1: it cannot).
"""

import random
import statistics


def paired_ratio(numerators, denominators, draws=2000, seed=0):
    """(median, low, high): the median of numerators[i] / denominators[i] over the
    rounds and its 95% bootstrap interval (resampling the rounds)."""
    ratios = [a / b for a, b in zip(numerators, denominators)]
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(draws))
    return statistics.median(ratios), medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]
