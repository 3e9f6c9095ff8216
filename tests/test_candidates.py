"""Candidate trees (playground/decoding/candidates.py): the trie of several deterministic continuations, and the
sampling rule at a node (one-hot drafts: keep x_i with the probability r(x_i) of what is left, else draw from
the rest), checked against the exact target distribution by chi-square, with two broken variants caught."""

from __future__ import annotations

import pytest
import torch

from playground.engine import acceptance
from playground.decoding import candidates
from tests.helpers import broken_select, fit, random_dists


def test_merge_builds_a_trie_parents_first_and_remembers_who_made_each_node():
    tree, owner = candidates.merge([[5, 6, 7], [5, 6, 8], [9], [5, 2]])
    assert tree.tokens == [5, 6, 7, 8, 9, 2]
    assert tree.parents == [-1, 0, 1, 1, -1, 0]
    assert tree.depths == [1, 2, 3, 3, 1, 2]
    assert owner == [0, 0, 0, 1, 2, 3]
    assert tree.children[0] == [0, 4] and tree.children[1] == [1, 5]  # row 0: the root's children
    empty, none = candidates.merge([])
    assert len(empty) == 0 and none == [] and empty.children == [[]]


def node_outputs(rule, q, cands, samples, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([rule(q, cands, g)[1] for _ in range(samples)])


@pytest.mark.parametrize("cands", [[2], [2, 0], [2, 0, 4], [0, 1, 2, 3, 4, 5]])
def test_node_rule_output_follows_the_target_distribution(cands):
    q = random_dists(1, 6, seed=12)[0]
    stat, critical = fit(node_outputs(acceptance.select_candidate, q, cands, 20_000), q)
    assert stat < critical, (cands, stat, critical)


def test_node_rule_keeps_each_candidate_with_its_target_probability():
    """P(keep x_i) = q(x_i): the candidates' own share of the output, not just the output's law."""
    q = random_dists(1, 6, seed=3)[0]
    g = torch.Generator().manual_seed(1)
    kept = torch.tensor([acceptance.select_candidate(q, [4, 1], g)[0] for _ in range(20_000)])
    share = torch.stack([(kept == 0).double().mean(), (kept == 1).double().mean()])
    torch.testing.assert_close(share, q[[4, 1]].double(), atol=0.015, rtol=0)


@pytest.mark.parametrize("broken", [dict(renormalise=False), dict(residual=False)])
def test_a_broken_node_rule_is_caught_by_the_same_test(broken):
    q, cands = random_dists(1, 6, seed=12)[0], [2, 0, 4]
    good, _ = fit(node_outputs(broken_select, q, cands, 20_000), q)
    stat, critical = fit(node_outputs(lambda *a: broken_select(*a, **broken), q, cands, 20_000), q)
    print(
        f"chi-square, candidates {cands}: correct rule {good:.1f}, broken {broken} {stat:.1f}, critical {critical:.1f}"
    )
    assert good < critical < stat, (good, stat, critical)
