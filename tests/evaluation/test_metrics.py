"""Mode arithmetic on hand-made predictions with known answers."""

import pytest

from setllm.evaluation.metrics import (
    METRICS,
    QuestionResult,
    answer_changes,
    majority_vote,
    plan_for,
)

ORDERS6 = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


def q(id_, label, preds, plan="all"):
    return QuestionResult(id_, label, ORDERS6[: len(preds)], tuple(preds), plan)


def agg(name, results, seed=0):
    return METRICS[name].aggregate(results, seed)


def test_single_random_adversarial_on_known_answers():
    always = q("a", 1, [1, 1, 1, 1, 1, 1])
    half = q("b", 0, [0, 0, 0, 2, 2, 2])
    once = q("c", 2, [0, 0, 0, 0, 0, 2])
    never = q("d", 1, [0, 2, 0, 2, 0, 2])
    results = [always, half, once, never]
    assert agg("single", results) == pytest.approx(100 * 2 / 4)  # a and b are right in the dataset's order
    assert agg("random", results) == pytest.approx(100 * (1 + 0.5 + 1 / 6 + 0) / 4)
    assert agg("adversarial", results) == pytest.approx(25.0)  # only a survives every ordering


def test_majority_clear_winner_and_vote_counts():
    r = q("x", 2, [2, 2, 2, 2, 0, 1])
    pick, votes = majority_vote(r)
    assert (pick, votes) == (2, {0: 1, 1: 1, 2: 4})
    assert agg("majority", [r]) == 100.0


def test_majority_ties_are_seeded_and_uniform():
    # 3 votes each for options 0 and 1: a tie; the label is 0.
    tied = [q(f"t{i}", 0, [0, 0, 0, 1, 1, 1]) for i in range(400)]
    picks = [majority_vote(r, seed=7)[0] for r in tied]
    assert set(picks) == {0, 1}
    assert picks == [majority_vote(r, seed=7)[0] for r in tied]  # reproducible
    assert 150 < picks.count(0) < 250  # uniform: about half
    assert agg("majority", tied, seed=7) == pytest.approx(100 * picks.count(0) / 400)
    assert [majority_vote(r, seed=8)[0] for r in tied] != picks  # the seed matters
    # A three-way tie picks among all three, never outside them.
    three = [QuestionResult(f"u{i}", 0, ORDERS6[:3], (0, 1, 2)) for i in range(200)]
    assert {majority_vote(r, 0)[0] for r in three} == {0, 1, 2}


def test_flip_rate_is_share_against_the_majority():
    r = q("f", 0, [0, 0, 0, 0, 1, 2])
    assert agg("flip", [r]) == pytest.approx(100 * 2 / 6)
    assert answer_changes(q("g", 0, [1, 0, 1, 2, 1, 1])) == 2


def test_one_run_stands_for_every_ordering():
    r = QuestionResult("s", 1, ((0, 1, 2),), (1,))
    assert {m: agg(m, [r]) for m in ("single", "random", "adversarial", "majority")} == dict.fromkeys(
        ("single", "random", "adversarial", "majority"), 100.0)


def test_plans_and_refusals():
    assert plan_for(["single"]) == "first"
    assert plan_for(["single", "adversarial"]) == "until_failure"
    assert plan_for(["adversarial", "majority"]) == "all"
    with pytest.raises(ValueError, match="unknown mode"):
        plan_for(["rnd"])
    stopped = q("e", 1, [1, 0], plan="until_failure")  # adversarial stopped at the first failure
    assert agg("adversarial", [stopped]) == 0.0
    with pytest.raises(ValueError, match="needs plan 'all'"):
        agg("random", [stopped])
    with pytest.raises(ValueError, match="orderings but"):
        QuestionResult("bad", 0, ORDERS6[:2], (0,))
