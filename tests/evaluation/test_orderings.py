"""Ordering enumeration and capping."""

import itertools
import math

import pytest

from setllm.evaluation.orderings import count_orderings, orderings


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_all_orderings_identity_first(k):
    got = orderings(k)
    assert len(got) == math.factorial(k) == count_orderings(k)
    assert got[0] == tuple(range(k))
    assert sorted(got) == sorted(itertools.permutations(range(k)))


def test_cap_first_is_the_papers_csqa_choice():
    got = orderings(5, cap=24, choice="first")
    assert got == list(itertools.permutations(range(5)))[:24]
    assert all(o[0] == 0 for o in got)  # the bias of that choice: option 0 always shown first


def test_cap_random_is_seeded_per_question():
    a = orderings(5, cap=24, seed=0, key="q1")
    assert len(a) == 24 == len(set(a)) and a[0] == (0, 1, 2, 3, 4)
    assert all(sorted(o) == list(range(5)) for o in a)
    assert a == orderings(5, cap=24, seed=0, key="q1")  # reproducible
    assert a != orderings(5, cap=24, seed=0, key="q2")  # each question its own sample
    assert a != orderings(5, cap=24, seed=1, key="q1")
    assert len({o[0] for o in a}) > 1  # unlike 'first', options rotate through first place


def test_cap_above_total_and_large_k():
    assert orderings(3, cap=100) == list(itertools.permutations(range(3)))
    big = orderings(10, cap=12, key="x")  # 10! is not enumerated: sampled with rejection
    assert len(set(big)) == 12 and big[0] == tuple(range(10))
    assert count_orderings(10, 12) == 12


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        orderings(4, cap=0)
    with pytest.raises(ValueError, match="unknown ordering choice"):
        orderings(4, cap=2, choice="last")
