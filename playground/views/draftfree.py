"""The draft-free strategies' rounds as words and HTML (suffix decoding, lookahead decoding): where each kept
token came from, and what one round did (the Step-through tab and the Run tab's round panel).

Pure functions of round records (records.SuffixExtras, records.LookaheadExtras); every piece of model text goes
through escape_text. A record of any other strategy gives "" or None everywhere here.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Sequence

from playground.core.numbers import fmt
from playground.core.records import LookaheadExtras, RoundRecord, SuffixExtras
from playground.views.text import escape_text, num, piece_text

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase

# A draft's source (SuffixExtras.store, LookaheadExtras.source) -> (its CSS slug, what the legend and tooltips say)
SOURCES = {
    "this run": ("run", "suffix tree of this run (the prompt and the output so far)"),
    "session memory": ("memory", "suffix tree of the session's earlier runs"),
    "window": ("window", "n-gram pool, from the Jacobi window's trajectories"),
    "sequence": ("sequence", "n-gram pool, from the prompt and the output (prompt pool)"),
}


def explains(record: RoundRecord) -> bool:
    """Whether explain_html has something to say about the round: its extras are a suffix or lookahead round's."""
    return isinstance(record.extras, (SuffixExtras, LookaheadExtras))


def kept_sources(record: RoundRecord) -> list[str]:
    """Per kept draft token of a draft-free round, where its draft came from (SOURCES' keys); [] otherwise."""
    x = record.extras
    return x.kept(record.accepted) if isinstance(x, (SuffixExtras, LookaheadExtras)) else []


def origin(record: RoundRecord, i: int) -> tuple[str, str] | None:
    """(CSS slug, a tooltip line) for kept draft token i of a draft-free round; None for any other round."""
    x = record.extras
    sources = kept_sources(record)
    if i >= len(sources) or sources[i] not in SOURCES:
        return None
    slug, what = SOURCES[sources[i]]
    if isinstance(x, SuffixExtras):
        seen = x.count[i] if i < len(x.count) else 0
        estimate = x.prob[i] if i < len(x.prob) else None
        return slug, (
            f"drafted from the {what}: its last {x.match} tokens matched; this continuation seen "
            f"{seen} time{'s' if seen != 1 else ''}, estimate {num(estimate)}"
        )
    collected = x.collected[i] if i < len(x.collected) else -1
    when = f", collected in round {collected + 1}" if collected >= 0 else ""
    return slug, f"drafted from the {what}{when}"


def legend(records: Sequence[RoundRecord]) -> str:
    """The sources seen in a run's rounds, as legend items (one underline style each); "" when none."""
    seen = list(dict.fromkeys(s for r in records for s in kept_sources(r)))
    if not seen:
        return ""
    items = "".join(
        f'<span class="legend-item"><span class="tok tok-accepted" data-source="{SOURCES[s][0]}">tok</span> '
        f"{html.escape(SOURCES[s][1])}</span>"
        for s in seen
        if s in SOURCES
    )
    return f'<div class="tok-legend src-legend"><span class="legend-item">kept drafts by source:</span>{items}</div>'


def _text(tokenizer: PreTrainedTokenizerBase, context: list[int], ids: Sequence[int]) -> str:
    """The tokens' text after the context, escaped, in a code element."""
    ctx, out = list(context), []
    for t in ids:
        out.append(piece_text(tokenizer, ctx, t))
        ctx.append(t)
    return f"<code>{escape_text(''.join(out)) or '∅'}</code>"


def _node_rows(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: list[int], cells) -> str:
    """One table row per draft node (the record's order): its token after its ancestors, kept or not, `cells(i)`."""
    parents = record.tree.parents if record.is_tree else list(range(-1, record.k - 1))
    rows = []
    for i, token in enumerate(record.draft_tokens):
        path, j = [], parents[i]
        while j >= 0:
            path.append(record.draft_tokens[j])
            j = parents[j]
        piece = escape_text(piece_text(tokenizer, context + path[::-1], token))
        kept = "kept" if i < record.accepted else "not kept"
        rows.append(
            f'<tr><td>{"·" * len(path)} <code>{piece or "∅"}</code> <span class="tok-id">#{int(token)}</span>'
            f"</td>{cells(i)}<td>{kept}</td></tr>"
        )
    return "".join(rows)


def _suffix(record: RoundRecord, x: SuffixExtras, tokenizer: PreTrainedTokenizerBase, context: list[int]) -> str:
    if record.k == 0:
        return (
            "<p>Suffix decoding: the last tokens occur nowhere earlier in the suffix tree (no match), so there was "
            "no draft: one plain target step.</p>"
        )
    shape = "a token tree" if record.is_tree else "a chain"
    where = SOURCES.get(x.store, ("", x.store))[1]
    head = (
        f"<p>Suffix decoding: the sequence's last <b>{x.match}</b> tokens were found in the {html.escape(where)}. "
        f"Of the continuations seen after them it proposed {shape} of {record.k} token{'s' if record.k != 1 else ''}, "
        f"the most frequent first: each token's estimate is the product of count(child) / count(parent) along its "
        f"path, and drafting stops under the minimum probability, at floor(factor × match) tokens, or at k. "
        f"Expected accepted tokens (the sum of the estimates): <b>{fmt(x.score, 2)}</b>. p is one-hot (a "
        f"deterministic draft), so the target keeps a token with probability q: lossless.</p>"
    )
    table = (
        '<table class="alts"><tr><th>draft token</th><th>seen</th><th>estimate</th><th>verdict</th></tr>'
        + _node_rows(record, tokenizer, context, lambda i: f"<td>{x.count[i]}</td><td>{num(x.prob[i])}</td>")
        + "</table>"
    )
    return head + table


def _lookahead(record: RoundRecord, x: LookaheadExtras, tokenizer: PreTrainedTokenizerBase, context: list[int]) -> str:
    levels = len(x.window)
    window = "".join(
        f"<tr><th>level {level}</th><td>{_text(tokenizer, context, row)}</td></tr>"
        for level, row in enumerate(x.window)
    )
    head = (
        f"<p>Lookahead decoding, one target pass of {x.width} tokens beyond the sequence: the Jacobi window "
        f"({levels} level{'s' if levels != 1 else ''}, each one iteration newer than the one below) and the "
        f"verification branch. The window's new guesses are the target's own argmaxes; each column's trajectory "
        f"is an n-gram: this round added or refreshed <b>{x.ngrams}</b> n-gram{'s' if x.ngrams != 1 else ''}, "
        f"and the pool holds <b>{x.pool}</b>.</p>"
        f'<table class="alts lookahead-window"><tr><th colspan="2">the window this round (guessed text, '
        f"column by column)</th></tr>{window}</table>"
    )
    if record.k == 0:
        return head + (
            "<p>The pool held no n-gram starting with the last token: nothing to verify, the pass added "
            "one token (the target's own).</p>"
        )
    verify = (
        f"<p>Verification: the pool's n-grams that start with the last token, merged into a tree of {record.k} "
        f"node{'s' if record.k != 1 else ''}; the target kept <b>{record.accepted}</b>. Greedy keeps the longest "
        f"path of the target's argmaxes; sampling tries a node's candidates in turn, each kept with its "
        f"probability under what is left of q (one-hot drafts: lossless).</p>"
    )
    source = lambda i: (
        f"<td>{html.escape(SOURCES.get(x.source[i], ('', x.source[i]))[1])}"
        f"{f' (round {x.collected[i] + 1})' if x.collected[i] >= 0 else ''}</td>"
    )
    table = (
        '<table class="alts"><tr><th>candidate token</th><th>from</th><th>verdict</th></tr>'
        + _node_rows(record, tokenizer, context, source)
        + "</table>"
    )
    return head + verify + table


def explain_html(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: Sequence[int]) -> str:
    """What a suffix or lookahead round did, before its tree or its positions are shown; "" for another strategy.
    context: the output ids before this round."""
    x, ctx = record.extras, list(context)
    if isinstance(x, SuffixExtras):
        return f'<div class="explain draftfree">{_suffix(record, x, tokenizer, ctx)}</div>'
    if isinstance(x, LookaheadExtras):
        return f'<div class="explain draftfree">{_lookahead(record, x, tokenizer, ctx)}</div>'
    return ""
