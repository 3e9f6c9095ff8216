"""The token-tree view: one round's tree, its accepted path highlighted, rejected branches faded,
the target's token marked; p and q on hover; model text escaped."""

from __future__ import annotations

import re
from dataclasses import replace

from playground.core.records import RoundRecord, SizedExtras, TreeExtras
from playground.views.tree import node_kinds, tree_html
from tests.helpers import Hostile, Words

# root " a" (the last token before the round); the tree: " the" -> " cat" (kept path), " the" -> " dog"
# (tried and rejected at the path's end), " sat" (a branch not reached); the correction " a".
TREE = RoundRecord(
    round=2,
    k=4,
    draft_tokens=[1, 2, 4, 3],
    accepted=2,
    token=5,
    token_kind="correction",
    new_tokens=[1, 2, 5],
    draft_s=0.0,
    verify_s=0.0,
    total_new=3,
    p=[0.5, 0.4, 0.3, 0.2],
    q=[0.6, 0.7, 0.05, 0.1],
    token_q=0.2,
    extras=TreeExtras(parents=[-1, 0, 1, -1], path=[0, 1]),
)


def spans(page: str) -> list[tuple[str, str]]:
    return re.findall(r'class="tree-node tree-(\w+)"[^>]*>([^<]*)<', page)


def test_nodes_nest_under_their_parents_with_the_path_highlighted_and_the_token_marked():
    page = tree_html(TREE, Words(), [5])
    assert node_kinds(TREE) == ["accepted", "accepted", "rejected", "unevaluated"]
    assert spans(page) == [
        ("root", " a"),
        ("accepted", " the"),
        ("accepted", " cat"),
        ("rejected", " dog"),
        ("correction", " a"),
        ("unevaluated", " sat"),
    ]
    # " dog" and the correction hang under " cat": three nested lists deep
    assert re.search(r"cat.*?<ul class=\"tree\"><li><span class=\"tree-node tree-rejected\"", page)
    assert "p (draft) = 0.400" in page and "q (target) = 0.700" in page and "min(1, q/p) = 1.000" in page
    assert "a path of 2" in page and "correction token" in page


def test_a_bonus_token_hangs_under_a_leaf_and_an_empty_path_under_the_root():
    bonus = replace(TREE, accepted=1, token_kind="bonus", extras=TreeExtras(parents=[-1, -1, -1, -1], path=[0]))
    page = tree_html(bonus, Words(), [5])
    assert [k for k, _ in spans(page)] == ["root", "accepted", "bonus"] + ["unevaluated"] * 3  # right under the leaf
    none = replace(TREE, accepted=0, token_kind="correction", extras=TreeExtras(parents=TREE.tree.parents, path=[]))
    kinds = [k for k, _ in spans(tree_html(none, Words(), [5]))]
    assert kinds == ["root", "rejected", "unevaluated", "unevaluated", "rejected", "correction"]


def test_model_text_is_escaped_and_chain_rounds_have_no_tree():
    page = tree_html(TREE, Hostile(), [5])
    assert "<b>" not in page.replace("<b>&amp;", "") and "&lt;b&gt;&amp;" in page
    chain = RoundRecord(
        round=0,
        k=1,
        draft_tokens=[1],
        accepted=1,
        token=2,
        token_kind="bonus",
        new_tokens=[1, 2],
        draft_s=0.0,
        verify_s=0.0,
        total_new=2,
    )
    assert tree_html(chain, Words(), [5]) == ""


def test_the_token_view_shows_a_tree_round_as_its_path_and_the_candidates_rejected_where_it_stopped():
    from playground.views.tokens import round_spans

    kinds = re.findall(r'data-kind="(\w+)"', round_spans(TREE, Words(), [5]))
    assert kinds == ["accepted", "accepted", "rejected", "correction"]  # " sat", on another branch, is not text


def test_a_sized_round_says_which_tree_was_planned_and_why():
    sized = SizedExtras(
        parents=[-1, 0, 1, -1],
        path=[0, 1],
        expected=2.41,
        steps=1.5,
        widths=[2, 1, 1],
        acceptance=[0.72, 0.1, 0.04],
        chain_k=4,
        chain_expected=2.88,
        chain_steps=1.86,
    )
    page = tree_html(replace(TREE, extras=sized), Words(), [5])
    assert "Sized tree (Sequoia)" in page and "p = 0.72 · 0.10 · 0.04" in page
    assert "4 nodes, 2 · 1 · 1 per depth" in page and "2.41 tokens" in page and "1.50 target steps" in page
    assert "k = 4" in page and "(1.55 per step)" in page and spans(page) == spans(tree_html(TREE, Words(), [5]))
    assert "Sized tree" not in tree_html(TREE, Words(), [5])  # a static or dynamic tree: no plan to explain


def test_the_kept_branch_is_drawn_and_said_with_its_ranks_and_what_a_chain_would_have_kept():
    """The path went through the draft's second choice at depth 1 (" sat" under the root, p 0.3 against " the"'s
    0.5): a chain of first choices would have kept none of it; the kept nodes' items carry the kept line."""
    second = replace(
        TREE,
        accepted=2,
        p=[0.5, 0.4, 0.3, 0.6],
        extras=TreeExtras(parents=[-1, 0, -1, 2], path=[2, 3]),
        draft_tokens=[1, 2, 3, 4],
    )
    page = tree_html(second, Words(), [5])
    assert page.count('<li class="tree-kept">') == 2
    line = re.search(r'<p class="tree-kept-line">(.*?)</p>', page).group(1)
    assert "“ sat dog”" in line and "choice 2 · 1" in line and "would have kept 0 of these 2" in line
    first = tree_html(TREE, Words(), [5])
    assert "choice 1 · 1" in first and "would have kept 2 of these 2" in first
    hostile = tree_html(second, Hostile(), [5])
    assert "<b>&" not in hostile and "“&lt;b&gt;&amp;&lt;b&gt;&amp;”" in hostile
    empty = replace(TREE, accepted=0, extras=TreeExtras(parents=TREE.tree.parents, path=[]))
    assert "Kept branch: none" in tree_html(empty, Words(), [5])
