"""Trees sized by the measured costs (playground/engine/treesize.py, "sized:N"): the dynamic programme against a brute
force over every tree of at most 6 nodes, the choice by expected tokens per target step, the acceptance by rank
learnt from the rounds, and the shape's parsing."""

from __future__ import annotations

import json
import math
import random
from functools import lru_cache

import pytest

from playground.run import recorded
from playground import trace
from playground.trace import tracefile
from playground.engine import treesize
from playground.core.errors import PlaygroundError
from playground.core.records import SizedExtras
from playground.core.treeshape import SIZED_NODES, TreeShape, parse_tree
from tests.helpers import run_all
from playground.engine.treesize import (
    PositionalAcceptance,
    TreeCosts,
    best_values,
    build,
    expected_tokens,
    plan,
    visits,
)

MAX = 6  # the brute force enumerates every tree of at most this many nodes


@lru_cache(maxsize=None)
def forests(n: int, depth: int, width: int) -> tuple:
    """Every ordered forest of exactly n nodes, at most `depth` deep, at most `width` siblings anywhere: a forest is
    a tuple of trees in rank order, a tree the forest of its children."""
    if n == 0:
        return ((),)
    if depth == 0:
        return ()
    out = []
    for first in range(1, n + 1):
        for below in forests(first - 1, depth - 1, width):
            for rest in forests(n - first, depth, width):
                if len(rest) < width:
                    out.append((below,) + rest)
    return tuple(out)


def value(forest: tuple, p: list[float], reach: float = 1.0) -> float:
    """Expected kept drafts: per node, the product of p by rank along its path."""
    return sum(reach * p[i] + value(child, p, reach * p[i]) for i, child in enumerate(forest))


def flat(forest: tuple) -> list[int]:
    """Nodes per depth of a forest."""
    widths: list[int] = []
    level = list(forest)
    while level:
        widths.append(len(level))
        level = [child for tree in level for child in tree]
    return widths


def vectors() -> list[list[float]]:
    rng = random.Random(43)
    out = [[0.7, 0.1, 0.04], [0.9, 0.05], [0.3, 0.3, 0.3], [0.5], [0.2, 0.6, 0.1]]  # the last one rises: any p
    for _ in range(5):
        raw = sorted((rng.random() for _ in range(rng.randint(1, 4))), reverse=True)
        out.append([x / (sum(raw) + rng.random()) for x in raw])
    return out


@pytest.mark.parametrize("p", vectors())
def test_the_programme_finds_the_best_tree_of_every_size_and_depth(p):
    G, S = best_values(p, MAX, MAX)
    for d in range(MAX + 1):
        for m in range(MAX + 1):
            brute = max(value(f, p) for n in range(m + 1) for f in forests(n, d, len(p)))
            assert G[d][m] == pytest.approx(brute, abs=1e-9), (p, d, m)
            parents, ranks = build(S, m, d)
            assert len(parents) <= m and (not parents or max(treesize.Plan(parents, ranks, 0, 1).depths) <= d)
            assert expected_tokens(parents, ranks, p) == pytest.approx(1 + G[d][m], abs=1e-9)


@pytest.mark.parametrize("p", vectors())
def test_the_chosen_tree_has_the_most_tokens_per_step_when_a_draft_pass_costs_the_same_at_any_width(p):
    costs = TreeCosts({1: 1.0, 3: 1.1, 5: 1.5, 7: 2.4}, {1: 0.3})  # V(n) rising faster and faster
    chosen = plan(p, costs, MAX)
    brute = max((1 + value(f, p)) / costs.steps(flat(f)) for n in range(1, MAX + 1) for f in forests(n, MAX, len(p)))
    assert chosen.rate == pytest.approx(brute, abs=1e-9)
    assert chosen.expected == pytest.approx(expected_tokens(chosen.parents, chosen.ranks, p), abs=1e-9)
    assert chosen.steps == pytest.approx(costs.steps(chosen.widths))


def test_the_costs_pick_between_a_chain_and_a_bushy_tree():
    p = [0.6, 0.25, 0.1]
    flat_target = TreeCosts({1: 1.0, 17: 1.1}, {1: 0.05})  # rows are free, draft passes nearly so: go wide
    steep = TreeCosts({1: 1.0, 2: 2.0}, {1: 0.05})  # each row a whole step: the fewest rows that pay
    dear_draft = TreeCosts({1: 1.0, 17: 1.1}, {1: 0.6})  # each depth costs: shallow and wide
    wide = plan(p, flat_target, 16)
    assert wide.nodes > 8 and max(wide.widths) >= 3 and wide.depth >= 3
    assert plan(p, steep, 16).nodes == 1
    shallow = plan(p, dear_draft, 16)
    assert shallow.depth < wide.depth and shallow.widths[0] == 3
    chain = plan([0.95, 0.01], TreeCosts({1: 1.0, 17: 1.5}, {1: 0.05}), 8)
    assert chain.widths == [1] * chain.depth and chain.chain_k == chain.depth  # an agreeable draft: a chain
    assert chain.rate == pytest.approx(chain.chain_expected / chain.chain_steps)


def test_costs_beyond_the_measured_rows_keep_rising():
    costs = TreeCosts({1: 1.0, 9: 1.4, 17: 2.2}, {1: 0.1})
    assert treesize.curve(costs.verify_s, 33) == pytest.approx(3.8)  # the last slope, on
    assert treesize.curve(costs.verify_s, 5) == pytest.approx(1.2)
    assert treesize.curve({1: 1.0, 2: 0.9}, 9) == 0.9  # never below the last measured
    with pytest.raises(ValueError):
        TreeCosts({}, {1: 0.1})


def test_acceptance_by_rank_learns_from_the_rounds_and_forgets_toward_its_prior():
    prior = PositionalAcceptance()
    assert prior.p[0] == pytest.approx(0.7) and list(prior.p) == sorted(prior.p, reverse=True) and sum(prior.p) < 1
    a = PositionalAcceptance()
    for _ in range(60):  # of 10 visits with 3 children tried: rank 1 accepted 5 times, rank 2 three times
        a.update([(3, 1)] * 5 + [(3, 2)] * 3 + [(3, 0)] * 2)
    assert a.p[0] == pytest.approx(0.5, abs=0.02) and a.p[1] == pytest.approx(0.3, abs=0.02) and a.p[2] < 0.04
    b = PositionalAcceptance()
    for _ in range(40):
        b.update([(1, 1)] * 3 + [(1, 0)])
    assert b.p[0] > 0.72 and b.p[1] == pytest.approx(0.1)  # rank 2 never tried: its prior
    for _ in range(300):
        b.update([])
    assert b.p == prior.p  # no evidence left: the prior again
    c = PositionalAcceptance()
    for _ in range(40):
        c.update([(3, 2)] * 3)  # only the second child is ever accepted: capped by the first's estimate
    assert c.p[1] == c.p[0] < 0.1
    d, e = PositionalAcceptance(), PositionalAcceptance()
    for visits_ in ([(2, 1), (2, 0)], [(1, 1), (3, 3)]):
        d.update(visits_)
        e.update(visits_)
    assert d.p == e.p and plan(d.p, treesize.ASSUMED, 8) == plan(e.p, treesize.ASSUMED, 8)  # deterministic


def test_a_round_is_counted_as_visits_by_rank():
    # root -> nodes 0, 1, 2 (ranks 1-3); node 1 -> 3, 4; node 3 -> 5; the path 1, 3 (rank 2, then rank 1)
    parents = [-1, -1, -1, 1, 1, 3]
    children = [[0, 1, 2], [], [3, 4], [], [5], [], []]
    assert visits(children, parents, [1, 3]) == [(3, 2), (2, 1), (1, 0)]
    assert visits(children, parents, []) == [(3, 0)]
    assert visits(children, parents, [1, 3, 5]) == [(3, 2), (2, 1), (1, 1)]  # a leaf: nothing tried after it


def test_the_sizer_reuses_a_plan_for_the_same_estimate():
    sizer = treesize.Sizer(8)
    first = sizer.plan()
    assert sizer.plan() is first and first.nodes <= 8
    extras = treesize.sized_extras([-1], [0], first)
    assert isinstance(extras, SizedExtras) and extras.expected == first.expected and extras.widths == first.widths


def test_a_sized_tree_is_parsed_and_validated_like_the_others():
    assert parse_tree("sized") == TreeShape(budget=SIZED_NODES, sized=True)
    shape = parse_tree(" Sized:24 ")
    assert shape.sized and shape.dynamic and shape.nodes == 24 and shape.label == "sized:24"
    assert parse_tree(shape.label) == shape and parse_tree("dynamic:24") != shape
    for bad, says in (
        ("sized:1", "from 2 to 64"),
        ("sized:65", "from 2 to 64"),
        ("sized:x", "sized:N"),
        ("sized-3", "sized:N"),
    ):
        with pytest.raises(PlaygroundError, match=says):
            parse_tree(bad)
    with pytest.raises(PlaygroundError, match="node cap"):
        TreeShape((2, 1), sized=True)


def test_a_sized_run_plans_from_measured_costs_and_records_its_plans(runner, tiny_spec):
    spec = tiny_spec("def fibonacci(n):", tree="sized:8", max_new_tokens=30)
    with runner.session(spec) as session:
        rounds = list(session.rounds())
        costs = session.tree_costs()
    assert costs is not None and set(costs.draft_s) == set(costs.verify_s)  # the draft's passes, measured too
    trees = [r for r in rounds if r.is_tree]
    assert trees and all(isinstance(r.extras, SizedExtras) for r in trees)
    for r in trees:
        x = r.extras
        assert r.k <= sum(x.widths) <= 8 and x.steps > 0 and x.expected >= 1 and len(x.acceptance) >= 1
        assert x.steps == pytest.approx(costs.steps(x.widths))
    s = trace.summarize(rounds)
    assert s["planned_tokens_per_round"] == pytest.approx(sum(r.extras.expected for r in trees[1:]) / len(trees[1:]))
    again = recorded._rounds(json.loads(tracefile.to_json(rounds))["rounds"], "rounds")  # read back: its own extras
    assert [r.extras for r in again if r.is_tree] == [r.extras for r in trees]
    assert math.isnan(trace.summarize(run_all(runner, tiny_spec(tree="dynamic:8")))["planned_steps"])
