"""The pool's fair shares between groups (workflows/fair_shares.py), as pure code: the
order it picks groups in, and invariant F (tests/faultkit.py) on that order."""

from __future__ import annotations

import random

import pytest

from tests.faultkit import share_problems
from workflows.fair_shares import UNGROUPED, FairShares


def picks(shares: FairShares, waiting: dict[str, int], count: int) -> list[str]:
    """`count` grants while the groups in `waiting` (group → its head's arrival) wait."""
    order = []
    for _ in range(count):
        shares.waiting(waiting)
        group = shares.pick(waiting)
        shares.charge(group)
        order.append(group)
    return order


def weighted(weights: dict[str, float]) -> FairShares:
    shares = FairShares()
    for group, weight in weights.items():
        shares.learn(group, weight)
    return shares


def test_equal_groups_alternate_from_the_one_whose_head_came_first() -> None:
    order = picks(weighted({"a": 1, "b": 1}), {"b": 1, "a": 2}, 6)
    assert "".join(order) == "bababa"


def test_three_to_one_gives_three_grants_of_four_and_the_light_group_one() -> None:
    order = picks(weighted({"heavy": 3, "light": 1}), {"light": 1, "heavy": 2}, 12)
    assert "".join("H" if g == "heavy" else "L" for g in order) == "HLHHHLHHHLHH"


@pytest.mark.parametrize(
    "weights",
    [
        {"a": 1, "b": 1},
        {"a": 3, "b": 1},
        {"a": 1, "b": 2, "c": 7},
        {"a": 0.5, "b": 1.5, "c": 10, "d": 100, UNGROUPED: 1},
        {"a": 0.01, "b": 1000},
    ],
    ids=["1:1", "3:1", "1:2:7", "five", "extreme"],
)
def test_every_group_is_within_one_grant_of_its_share_at_every_point(
    weights: dict[str, float],
) -> None:
    order = picks(weighted(weights), {g: i for i, g in enumerate(weights)}, 1000)
    assert share_problems(order, weights) == []


def test_shares_hold_for_random_weights_and_ties() -> None:
    rng = random.Random(5)
    for _ in range(50):
        weights = {f"g{i}": rng.choice([1, 2, 3, 0.5, rng.uniform(0.1, 50)]) for i in range(5)}
        order = picks(weighted(weights), dict.fromkeys(weights, 0), 300)
        assert share_problems(order, weights) == [], weights


def test_first_come_first_served_fails_invariant_f() -> None:
    fifo = ["a"] * 6 + ["b"] * 6
    problems = share_problems(fifo, {"a": 1, "b": 1})
    assert problems and problems[0].startswith("after grant 3: group a had 3")


def test_a_group_that_comes_back_has_no_credit_for_its_absence() -> None:
    shares = weighted({"a": 1, "b": 1})
    picks(shares, {"a": 1, "b": 2}, 4)
    assert set(picks(shares, {"a": 1}, 10)) == {"a"}  # b has nothing waiting
    # b is back: the two alternate, and a is not made to wait while b makes up ten.
    order = picks(shares, {"a": 1, "b": 2}, 6)
    assert sorted(order) == ["a", "a", "a", "b", "b", "b"]
    assert share_problems(order, {"a": 1, "b": 1}) == []


def test_a_group_that_left_behind_its_share_leaves_no_gap() -> None:
    shares = weighted({"a": 1, "b": 1, "c": 1})
    picks(shares, {"a": 1, "b": 2, "c": 3}, 2)  # a and b granted, c owed one
    shares.waiting({"a": 1, "b": 2})  # c leaves: someone must still be eligible
    assert shares.pick({"a": 1, "b": 2}) in {"a", "b"}
    assert min(shares.start.values()) <= shares.virtual


def test_weights_come_from_requests_and_are_forgotten_with_the_groups_jobs() -> None:
    shares = FairShares()
    shares.learn("a", 3)
    shares.learn("a", None)  # a request that did not know it changes nothing
    shares.learn(UNGROUPED, 5)  # the ungrouped class always weighs 1
    assert (shares.weight("a"), shares.weight("b"), shares.weight(UNGROUPED)) == (3, 1, 1)
    shares.keep_weights({"b"})
    assert shares.weights == {}


def test_virtual_times_stay_small_however_many_grants() -> None:
    shares = weighted({"a": 3, "b": 1})
    picks(shares, {"a": 1, "b": 2}, 20_000)
    assert max(shares.virtual, *shares.start.values()) < 2
