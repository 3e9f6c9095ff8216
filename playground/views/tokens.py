"""Round records -> HTML: one <span> per token, coloured by what happened to it.

Pure functions (records + tokenizer in, an HTML string out). Every piece of text that
comes from the user or the model goes through html.escape; newlines stay visible.
Styling lives in assets/style.css (classes `tok-*`), so the markup carries no colour.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Iterable, Sequence

from playground.core.records import CrossExtras, RoundRecord
from playground.views import draftfree
from playground.views.text import escape_text, num, piece_text

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase

# What each class means; the legend and the tests read this.
KINDS = {
    "accepted": "accepted draft token",
    "rejected": "rejected draft token (the first one the target disagreed with)",
    "unevaluated": "draft token after a rejection (never evaluated)",
    "correction": "target's correction (replaces the rejected token)",
    "bonus": "bonus token (all drafts accepted; the target adds one more)",
    "target": "target token (target alone, no draft)",
}
# Okabe-Ito colours, for the legend swatches and the charts (the CSS uses the same values).
COLORS = {
    "accepted": "#009E73",
    "rejected": "#D55E00",
    "unevaluated": "#D55E00",
    "correction": "#0072B2",
    "bonus": "#E69F00",
    "target": "#999999",
}
LEGEND_LABELS = {
    "accepted": "accepted draft",
    "rejected": "rejected draft (struck through)",
    "unevaluated": "not evaluated (faded)",
    "correction": "target correction (boxed)",
    "bonus": "bonus token (underlined)",
    "target": "target alone",
}


def tooltip(
    kind: str,
    token: int,
    text: str,
    p: float | None = None,
    q: float | None = None,
    u: float | None = None,
    meaning: str = "",
) -> str:
    """The hover text of one token: what it is (`meaning`, else KINDS[kind]), p (draft), q (target),
    min(1, q/p), u."""
    lines = [meaning or KINDS[kind], f"token {token}: {text!r}"]
    if p is not None:
        lines.append(f"p (draft) = {num(p)}")
    if q is not None:
        lines.append(f"q (target) = {num(q)}")
    if p is not None and q is not None and p > 0 and q == q:  # q == q: not nan
        lines.append(f"min(1, q/p) = {num(min(1.0, q / p))}")
    if u is not None:
        lines.append(
            f"u = {num(u)} ({'accept' if kind == 'accepted' else 'reject'}: u {'<' if kind == 'accepted' else '>='} min(1, q/p))"
        )
    return "\n".join(lines)


def token_span(kind: str, token: int, text: str, title: str, source: str = "") -> str:
    """One token as a span; text and title are escaped here. source: where a kept draft came from (a draft-free
    strategy's store, views.draftfree.SOURCES' slugs: styled by the CSS)."""
    where = f' data-source="{html.escape(source, quote=True)}"' if source else ""
    return (
        f'<span class="tok tok-{kind}" data-kind="{kind}" data-token="{int(token)}"{where} '
        f'title="{html.escape(title, quote=True)}">{escape_text(text)}</span>'
    )


def origin(record: RoundRecord, i: int) -> tuple[str, str]:
    """(source slug, tooltip lines) of kept draft token i: a cross-tokenizer draft's own pieces, a draft-free
    strategy's store (views.draftfree); ("", "") for the others."""
    found = draftfree.origin(record, i)
    return (found[0], "\n" + found[1]) if found else ("", draft_side(record, i))


def draft_side(record: RoundRecord, i: int) -> str:
    """For a cross-tokenizer draft: the draft's own pieces behind draft token i, and the whole proposal."""
    cross = record.extras if isinstance(record.extras, CrossExtras) else None
    if cross is None or i >= len(cross.source):
        return ""
    return f"\ndraft side (its own tokenizer): {cross.source[i]!r}\nthe draft proposed: {cross.text!r}"


def round_spans(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: list[int]) -> str:
    """The spans of one round, in reading order: kept drafts, rejected drafts where they were
    proposed, then the target's token. `context` is the output before this round (ids);
    it is extended with what the round appended."""

    def at(values: list[float], i: int) -> float | None:
        return values[i] if i < len(values) else None

    spans, kept = [], record.new_tokens
    shown = 0
    for i in range(min(record.accepted, len(kept))):  # kept drafts (the EOS cut may stop early)
        tok = record.draft_tokens[i]
        text = piece_text(tokenizer, context, tok)
        source, note = origin(record, i)
        title = tooltip("accepted", tok, text, at(record.p, i), at(record.q, i), at(record.u, i)) + note
        spans.append(token_span("accepted", tok, text, title, source))
        context.append(tok)
        shown += 1
    if record.accepted < record.k and shown == record.accepted:  # the rejected ones, not in the output
        scratch = list(context)
        for i in range(record.accepted, record.k):
            tree = record.is_tree  # a token tree: the candidates tried where the path stopped (views.tree has the rest)
            if tree and record.tree.parents[i] != record.accepted - 1:
                break
            tok = record.draft_tokens[i]
            kind = "rejected" if i == record.accepted or tree else "unevaluated"
            text = piece_text(tokenizer, scratch, tok)
            if kind == "rejected":
                title = tooltip(kind, tok, text, at(record.p, i), at(record.q, i), at(record.u, i))
            else:
                title = tooltip(kind, tok, text, at(record.p, i), at(record.q, i))
            spans.append(token_span(kind, tok, text, title + draft_side(record, i)))
            if not tree:  # siblings are alternatives at one position, not a sequence
                scratch.append(tok)
    if len(kept) > shown:  # the target's own token: correction, bonus or plain
        tok = kept[shown]
        kind = record.token_kind
        text = piece_text(tokenizer, context, tok)
        spans.append(token_span(kind, tok, text, tooltip(kind, tok, text, q=record.token_q)))
        context.append(tok)
    return "".join(spans)


def prompt_span(prompt: str) -> str:
    return f'<span class="tok-prompt" title="prompt">{escape_text(prompt)}</span>' if prompt else ""


def wrap(body: str, prompt: str = "") -> str:
    """The output box around the token spans (the prompt first, dimmed)."""
    return f'<div class="tok-output">{prompt_span(prompt)}{body}</div>'


def render_rounds(records: Iterable[RoundRecord], tokenizer: PreTrainedTokenizerBase, prompt: str = "") -> str:
    """All rounds of a run as one HTML block."""
    context: list[int] = []
    return wrap("".join(round_spans(r, tokenizer, context) for r in records), prompt)


def plain_text(records: Iterable[RoundRecord], tokenizer: PreTrainedTokenizerBase) -> str:
    """The generated text (no markup, not escaped)."""
    ids = [t for r in records for t in r.new_tokens]
    return tokenizer.decode(ids, skip_special_tokens=True)


def legend(kinds: Sequence[str] = ("accepted", "rejected", "unevaluated", "correction", "bonus", "target")) -> str:
    """Sample spans of each kind with their meaning."""
    items = "".join(
        f'<span class="legend-item"><span class="tok tok-{k}" title="{html.escape(KINDS[k])}">tok</span> '
        f"{html.escape(LEGEND_LABELS[k])}</span>"
        for k in kinds
    )
    return f'<div class="tok-legend">{items}<span class="legend-item legend-hint">hover a token for p, q, min(1, q/p), u</span></div>'


def empty_output(message: str = "The generated text appears here, token by token.") -> str:
    return f'<div class="tok-output tok-empty">{html.escape(message)}</div>'
