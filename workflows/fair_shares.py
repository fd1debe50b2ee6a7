"""Fair shares between the groups waiting at a pool (docs/scheduling.md, Pools).

The pool picks the group it grants next by weighted fair queueing (WF2Q): each waiting
group has a virtual start time, and the pool's virtual time moves on by 1/W with each
grant, W the sum of the waiting groups' weights. A group may be picked once its start
time is reached (it is not ahead of its share); among those, the one whose next grant
ends first in virtual time (start + 1/weight), then the one whose head came first. A
grant moves the group's start on by 1/weight. While the same groups wait, after n
grants group g has had n·w_g/W of them, less than one grant off, at every point
(tests/test_fair_shares.py). A group that stops waiting is forgotten: coming back, it
starts at the present virtual time, with no credit for the time it was away.

Stdlib and pydantic only, and deterministic: the pool gate carries this state across
continue-as-new.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel, Field

# The class of the jobs that name no group: one more group, of weight 1.
UNGROUPED = ""
# Virtual times are compared with this slack (they are sums of 1/weight).
EPSILON = 1e-9


class FairShares(BaseModel):
    """Where each waiting group stands, and the weights the pool knows."""

    virtual: float = 0.0
    start: dict[str, float] = Field(default_factory=dict)
    # The weight each group's newest request carried (a group's weight is its gate's:
    # the job learns it with its group lease); 1 for a group not heard of.
    weights: dict[str, float] = Field(default_factory=dict)

    def learn(self, group: str, weight: float | None) -> None:
        """A request of `group` carried `weight` (None: it did not know it)."""
        if weight is not None and group != UNGROUPED:
            self.weights[group] = weight

    def weight(self, group: str) -> float:
        return self.weights.get(group, 1.0)

    def keep_weights(self, groups: Collection[str]) -> None:
        """Forget the weights of groups with no job at the pool any more."""
        self.weights = {g: w for g, w in self.weights.items() if g in groups}

    def waiting(self, groups: Collection[str]) -> None:
        """The groups that wait now: a new one starts at the present virtual time, those
        gone are forgotten. Times are then moved so that the smallest is 0 (the order is
        the same; the numbers stay small)."""
        self.start = {g: s for g, s in self.start.items() if g in groups}
        for group in sorted(groups):
            self.start.setdefault(group, self.virtual)
        if not self.start:
            self.virtual = 0.0
            return
        # None may be eligible after a group that was behind its share left.
        self.virtual = max(self.virtual, min(self.start.values()))
        base = min(self.virtual, *self.start.values())
        self.virtual -= base
        self.start = {g: s - base for g, s in self.start.items()}

    def pick(self, heads: Mapping[str, int]) -> str:
        """The group to grant next among the waiting ones (`heads`: each group's head's
        place in arrival order, which breaks ties). Call `waiting(heads)` first."""

        def finish(group: str) -> tuple[float, int, str]:
            return (self.start[group] + 1 / self.weight(group), heads[group], group)

        eligible = [g for g in heads if self.start[g] <= self.virtual + EPSILON]
        return min(eligible or heads, key=finish)

    def charge(self, group: str) -> None:
        """`group` was granted a lease (a group not waiting is not counted)."""
        if group not in self.start:
            return
        total = sum(self.weight(g) for g in self.start)
        self.start[group] += 1 / self.weight(group)
        self.virtual += 1 / total
