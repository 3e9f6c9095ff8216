"""Step-through: what one draft/verify round did, position by position, as HTML.

For each evaluated position: the proposed token with p (draft) and q (target) bars, its likeliest
alternatives, the verdict (argmax q when greedy; u < min(1, q/p) when sampling), and, at a
rejection, the residual norm(max(0, q - p)) the correction is drawn from. Needs records of a run
with DecodeConfig(explain=N). Every piece of model text goes through escape_text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from playground.core.records import RoundRecord
from playground.views.text import escape_text, num, piece_text

# Which letter is which: the page follows Chen et al.; students often read Leviathan et al. first, who swap them.
LETTERS = (
    " (q: the target's probability, p: the draft's; Leviathan et al. write p for the target's and q for the draft's)"
)

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase


def _bar(value: float | None, kind: str) -> str:
    """A probability as a bar (CSS class bar-p / bar-q) and its number; nan or None: an empty bar, "n/a"."""
    width = 0.0 if value is None or math.isnan(value) else max(0.0, min(1.0, value)) * 80  # room for the number
    return f'<span class="bar bar-{kind}" style="width:{width:.1f}%"></span><span class="bar-num">{num(value)}</span>'


def _alternatives_table(
    rows: list[tuple[int, float, float]],
    tokenizer: PreTrainedTokenizerBase,
    context: list[int],
    marks: dict[int, str],
    show_p: bool = True,
) -> str:
    """One row per candidate token: its text (blanks made visible) and id, a p bar (unless show_p is
    False) and a q bar; marks[token] ("draft", "correction", ...) labels a row."""
    out = [
        '<table class="alts"><tr><th>token</th>' + ("<th>p (draft)</th>" if show_p else "") + "<th>q (target)</th></tr>"
    ]
    for token, p, q in rows:
        piece = piece_text(tokenizer, context, token)
        text = escape_text(piece.replace(" ", "␣") if piece and not piece.strip() else piece)  # visible blanks
        mark = marks.get(token, "")
        label = f' <span class="alt-mark">{mark}</span>' if mark else ""
        p_cell = f"<td>{_bar(p, 'p')}</td>" if show_p else ""
        out.append(
            f'<tr><td><code>{text or "∅"}</code> <span class="tok-id">#{int(token)}</span>{label}</td>'
            f"{p_cell}<td>{_bar(q, 'q')}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def explain_round(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: Sequence[int], greedy: bool) -> str:
    """One round, position by position (needs a decoder run with DecodeConfig(explain=N)).
    context: the output ids before this round."""
    ctx = list(context)
    k, n = record.k, record.accepted
    head = (
        f"<h4>Round {record.round + 1}: the drafter proposed {k} token{'s' if k != 1 else ''}; "
        f"the target kept {n} and added a {record.token_kind} token</h4>"
    )
    if k == 0:
        head = f"<h4>Round {record.round + 1}: no draft (k = 0), one plain target step</h4>"
    parts = [head]
    rule = (
        "greedy: a draft token is kept when it is the target's most likely token (argmax q)"
        if greedy
        else "sampling: keep draft token x when u < min(1, q(x)/p(x)), u uniform in [0, 1)"
    ) + LETTERS
    parts.append(f'<p class="rule">{rule}</p>')
    for i, rows in enumerate(record.alternatives):
        is_bonus = i == k
        marks: dict[int, str] = {}
        if not is_bonus:
            tok, p, q = record.draft_tokens[i], record.p[i], record.q[i]
            marks[tok] = "draft"
            word = escape_text(piece_text(tokenizer, ctx, tok))
            if greedy:
                top = max(rows, key=lambda r: r[2])[0]
                kept = i < n
                verdict = (
                    f"argmax q is <code>{escape_text(piece_text(tokenizer, ctx, top))}</code>"
                    f" {'=' if kept else '≠'} the draft → {'accepted' if kept else 'rejected'}"
                )
            else:
                ratio = min(1.0, q / p) if p > 0 else float("nan")  # prompt lookup: p = 1
                u = record.u[i] if i < len(record.u) else float("nan")
                kept = i < n
                verdict = (
                    f"u = {num(u)} {'<' if kept else '≥'} min(1, q/p) = {num(ratio)}"
                    f" → {'accepted' if kept else 'rejected'}"
                )
            if i == n:
                marks[record.token] = "correction"
            cls = "accepted" if i < n else "rejected"
            parts.append(
                f'<div class="pos pos-{cls}"><div class="pos-head">position {i + 1}: draft '
                f"<code>{word}</code> (p = {num(p)}, q = {num(q)}): {verdict}</div>"
            )
        else:
            marks[record.token] = "bonus"
            parts.append(
                '<div class="pos pos-bonus"><div class="pos-head">all drafts accepted: the bonus token '
                f"is {'the argmax' if greedy else 'drawn from'} q at the next position</div>"
            )
        parts.append(_alternatives_table(rows, tokenizer, ctx, marks, show_p=not is_bonus))
        if i == n and n < k:
            if record.residual:
                parts.append(
                    '<div class="residual-head">the correction is drawn from the residual norm(max(0, q − p)):</div>'
                )
                parts.append(
                    _alternatives_table(
                        [(t, float("nan"), r) for t, r in record.residual],
                        tokenizer,
                        ctx,
                        {record.token: "drawn"},
                        show_p=False,
                    )
                )
            elif greedy:
                parts.append('<div class="residual-head">greedy: the correction is the argmax of q</div>')
        parts.append("</div>")
        if i < k:
            ctx.append(record.draft_tokens[i] if i < n else record.token)
    if n < k - 1:
        rest = "".join(escape_text(piece_text(tokenizer, ctx, t)) for t in record.draft_tokens[n + 1 :])
        parts.append(f'<p class="unevaluated">not evaluated (after the rejection): <code>{rest}</code></p>')
    return '<div class="explain">' + "".join(parts) + "</div>"
