"""A token-tree round (DecodeConfig.tree) as an HTML tree: what the draft proposed, what the target kept.

One node per draft token, nested under its parent (the root is the last token before the round). The
accepted path is highlighted, the candidates tried and rejected where the path stopped are struck
through, the branches the verification never reached are faded, and the target's own token (the
correction, or the bonus when the path ends at a leaf) hangs under the path's last node. The kept branch is drawn
with a solid line and said in words: its tokens, each node's rank among its siblings by the draft's p, and how
much of it a chain of the draft's first choices would have kept. Hovering a
node shows its id, p (draft) and q (target, in its branch's context) and min(1, q/p). Pure: a record
and a tokenizer in, a string out; all model text goes through escape_text (html.escape).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Sequence

from playground.core.records import RoundRecord, SizedExtras
from playground.views import tokens
from playground.views.text import escape_text, num, piece_text

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase

STYLE = """<style>
.tree-view { font-size: 14px; }
.tree-view ul.tree { list-style: none; margin: 0; padding-left: 18px; border-left: 1px dotted var(--border-color-primary, #bbb); }
.tree-view > ul.tree { border-left: none; padding-left: 0; }
.tree-view li { margin: 2px 0; }
.tree-node { font-family: var(--font-mono, ui-monospace, monospace); padding: 0 4px; border-radius: 4px;
  border: 1px solid transparent; white-space: pre; }
.tree-node .tree-pq { font-size: 11px; opacity: 0.75; margin-left: 6px; font-family: var(--font-sans, sans-serif); }
.tree-root { color: var(--body-text-color-subdued, #777); }
.tree-accepted { background: var(--tok-accepted-bg, rgba(0, 158, 115, 0.16)); border-color: var(--tok-accepted, #009E73);
  font-weight: 600; }
.tree-rejected { color: var(--tok-rejected-text, #A84300); text-decoration: line-through;
  text-decoration-color: var(--tok-rejected, #D55E00); }
.tree-unevaluated { opacity: 0.45; }
.tree-correction { border: 2px solid var(--tok-correction, #0072B2); font-weight: 600; }
.tree-bonus { border-bottom: 3px solid var(--tok-bonus, #E69F00); font-weight: 600; }
.tree-view li.tree-kept { border-left: 3px solid var(--tok-accepted, #009E73); margin-left: -2px; padding-left: 2px; }
.tree-kept-line { margin: 2px 0 6px; }
</style>"""

KINDS = {
    "accepted": "on the accepted path",
    "rejected": "tried and rejected where the path stopped",
    "unevaluated": "on a branch the verification did not reach",
    "correction": "the target's correction (after the path's last node)",
    "bonus": "bonus token (the path reached a leaf; the target adds one more)",
}


def node_kinds(record: RoundRecord) -> list[str]:
    """Per node of the record's tree: "accepted", "rejected" or "unevaluated"."""
    tree = record.tree
    path = set(tree.path)
    last = tree.path[-1] if tree.path else -1
    return [
        "accepted" if i in path else "rejected" if parent == last else "unevaluated"
        for i, parent in enumerate(tree.parents)
    ]


def _node(kind: str, token: int, text: str, p: float | None, q: float | None) -> str:
    shown = text.replace(" ", "␣") if text and not text.strip() else text  # a blank stays visible
    numbers = f"p {num(p)} · q {num(q)}" if p is not None else f"q {num(q)}"
    return (
        f'<span class="tree-node tree-{kind}" data-kind="{kind}" data-token="{int(token)}" '
        f'title="{html.escape(tokens.tooltip(kind, token, text, p, q, meaning=KINDS[kind]), quote=True)}">{escape_text(shown) or "∅"}'
        f'<span class="tree-pq">{numbers}</span></span>'
    )


def tree_html(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: Sequence[int]) -> str:
    """The round's tree (a record of a tree round: record.is_tree). context: the output ids before the round."""
    if not record.is_tree:
        return ""
    kinds = node_kinds(record)
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(record.tree.parents):
        children.setdefault(parent, []).append(i)
    last = record.tree.path[-1] if record.tree.path else -1

    def branch(parent: int, ctx: list[int]) -> str:
        items = []
        for i in children.get(parent, []):
            tok = record.draft_tokens[i]
            item = _node(kinds[i], tok, piece_text(tokenizer, ctx, tok), record.p[i], record.q[i])
            kept = ' class="tree-kept"' if kinds[i] == "accepted" else ""
            items.append(f"<li{kept}>{item}{branch(i, ctx + [tok])}</li>")
        if parent == last:  # the target's own token after the path
            text = piece_text(tokenizer, ctx, record.token)
            items.append(f"<li>{_node(record.token_kind, record.token, text, None, record.token_q)}</li>")
        return f'<ul class="tree">{"".join(items)}</ul>' if items else ""

    ctx = list(context)
    root_text = piece_text(tokenizer, ctx[:-1], ctx[-1]) if ctx else ""
    root = (
        f'<span class="tree-node tree-root" title="the last token before this round (the root)">'
        f"{escape_text(root_text) or '∅'}</span>"
    )
    n, T = record.accepted, record.k
    head = (
        f"<h4>Round {record.round + 1}: a tree of {T} draft token{'s' if T != 1 else ''}, scored in one target "
        f"pass; the target kept a path of {n} and added a {html.escape(record.token_kind)} token</h4>"
    )
    body = f'<ul class="tree"><li>{root}{branch(-1, ctx)}</li></ul>'
    kept = kept_html(record, tokenizer, ctx)
    return f'<div class="tree-view">{STYLE}{head}{kept}{sized_html(record)}{body}</div>'


def sibling_ranks(record: RoundRecord) -> list[int]:
    """Per node of the kept path: its rank among its siblings by the draft's p (1: the draft's first choice)."""
    tree, ranks = record.tree, []
    for node in tree.path:
        siblings = [i for i, parent in enumerate(tree.parents) if parent == tree.parents[node]]
        ranks.append(1 + sum(record.p[i] > record.p[node] for i in siblings))
    return ranks


def kept_html(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, ctx: list[int]) -> str:
    """Which branch the round kept, in words: its tokens, each node's rank among its siblings, and how much of it a
    chain of the draft's first choices would have kept (the branches' worth this round)."""
    path, ranks = record.tree.path, sibling_ranks(record)
    pieces, seen = [], list(ctx)
    for node in path:
        pieces.append(escape_text(piece_text(tokenizer, seen, record.draft_tokens[node])))
        seen.append(record.draft_tokens[node])
    token = escape_text(piece_text(tokenizer, seen, record.token))
    chain = next((d for d, r in enumerate(ranks) if r != 1), len(ranks))
    if not path:
        return f'<p class="tree-kept-line">Kept branch: none; the target\'s own token “{token}”.</p>'
    choices = " · ".join(map(str, ranks))
    return (
        f'<p class="tree-kept-line">Kept branch: <strong>“{"".join(pieces)}”</strong> then “{token}”; by depth, the draft\'s '
        f"choice {choices} among siblings (1: its likeliest); a chain of its first choices would have kept {chain} "
        f"of these {len(path)}.</p>"
    )


def sized_html(record: RoundRecord) -> str:
    """Why a sized tree's round drafted this tree (records.SizedExtras, playground/engine/treesize.py); "" otherwise."""
    x = record.extras
    if not isinstance(x, SizedExtras) or not x.steps:
        return ""
    widths = " · ".join(map(str, x.widths))
    ranks = " · ".join(f"{p:.2f}" for p in x.acceptance[:4])
    chain = x.chain_expected / x.chain_steps if x.chain_steps else float("nan")
    return (
        f'<p class="tree-sized">Sized tree (Sequoia): the draft\'s children of rank 1, 2, 3, … were accepted with '
        f"p = {ranks} so far; under those and the measured pass costs, the tree with the most expected tokens per "
        f"target step has {sum(x.widths)} nodes, {widths} per depth: <b>{x.expected:.2f} tokens</b> expected "
        f"for <b>{x.steps:.2f} target steps</b> (the draft's passes and the target's), {x.expected / x.steps:.2f} "
        f"per step; the best chain, k = {x.chain_k}, would expect {x.chain_expected:.2f} for {x.chain_steps:.2f} "
        f"({chain:.2f} per step). This round kept {record.accepted} + 1.</p>"
    )
