"""How a chain of draft tokens (ChainDraft) is verified: one target pass over the tokens not yet in its cache and the k
drafts, the chain rule (acceptance.chain_greedy / chain_sampling), and the round's record: p and q of every
draft token, the margins, and with DecodeConfig.explain the step-through's alternatives and residual.

q: target prob, p: draft prob. A deterministic drafter (Draft.logits None) has p one-hot on its proposal.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from playground.engine.acceptance import chain_greedy, chain_sampling, residual
from playground.core.config import DecodeConfig
from playground.engine.cache import crop_cache
from playground.core.draft import Draft, Verdict
from playground.kernels.step import TargetCache, score
from playground.core.records import RoundRecord
from playground.engine.sampling import logits_to_probs, wide


class ChainDraft(Draft):
    """A chain of draft tokens (Draft.tokens, Draft.logits), verified by the chain rule (verify below)."""

    lean = True  # verified through kernels.step.score: the lean forward's cache serves

    def verify(
        self,
        target: PreTrainedModel,
        cache: TargetCache,
        ids: torch.Tensor,
        cached: int,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> RoundRecord:
        return verify(self, target, cache, ids, cached, config, generator)


def verify(
    draft: Draft,
    target: PreTrainedModel,
    cache: TargetCache,
    ids: torch.Tensor,
    cached: int,
    config: DecodeConfig,
    generator: torch.Generator | None,
) -> RoundRecord:
    """Score, judge and record a chain (ChainDraft.verify); the target's cache is left at the sequence and the kept
    prefix (the rejected drafts dropped, never recomputed)."""
    params = config.sampling
    length, drafted = ids.shape[1], draft.tokens.shape[0]
    feed = torch.cat([ids[:, cached:], draft.tokens.view(1, -1)], dim=1)
    logits = score(target, feed, cache, drafted + 1)
    if params.greedy:
        verdict = chain_greedy(draft.tokens, logits)
        q_probs = p_probs = None
    else:
        q_probs = logits_to_probs(logits, params)
        p_probs = None if draft.logits is None else logits_to_probs(draft.logits, params)
        verdict = chain_sampling(draft.tokens, p_probs, q_probs, generator)
    ints = torch.cat([verdict.num_accepted.view(1), verdict.next_token.view(1), draft.tokens]).tolist()  # the host sync
    n, token, draft_tokens = ints[0], ints[1], ints[2:]
    record = RoundRecord(
        round=0,
        k=drafted,
        draft_tokens=draft_tokens,
        accepted=n,
        token=token,
        token_kind="target" if drafted == 0 else ("bonus" if n == drafted else "correction"),
        new_tokens=[],
        draft_s=0.0,
        verify_s=0.0,
        total_new=0,
    )
    if config.record:
        _record_probs(record, draft, logits, p_probs, q_probs, verdict, config)
    crop_cache(cache, length + n)
    return record


def _record_probs(
    record: RoundRecord,
    draft: Draft,
    logits: torch.Tensor,
    p_probs: torch.Tensor | None,
    q_probs: torch.Tensor | None,
    verdict: Verdict,
    config: DecodeConfig,
) -> None:
    """p and q of each draft token (and q of the target's token) for the views."""
    k, device = record.k, logits.device
    if q_probs is None:
        q_probs = torch.softmax(wide(logits), -1)
    if p_probs is None and draft.logits is not None:
        p_probs = torch.softmax(wide(draft.logits), -1)
    idx = torch.arange(k, device=device)
    q = q_probs[idx, draft.tokens]
    p = p_probs[idx, draft.tokens] if p_probs is not None else torch.ones_like(q)
    token_q = q_probs[verdict.num_accepted, verdict.next_token].view(1)
    u = verdict.u if verdict.u is not None else q.new_empty(0)
    if config.sampling.greedy:  # how close each decision was: top-1 minus top-2 logit per position
        top2 = torch.topk(wide(logits), 2, dim=-1).values
        margins = top2[:, 0] - top2[:, 1]
    else:
        margins = q.new_empty(0)
    floats = torch.cat([p, q, token_q, margins, wide(u)]).tolist()
    record.p, record.q, record.token_q = floats[:k], floats[k : 2 * k], floats[2 * k]
    m = len(margins)
    record.margins = floats[2 * k + 1 : 2 * k + 1 + m][: record.accepted + 1]  # the positions whose tokens were kept
    record.u = floats[2 * k + 1 + m :][: record.accepted + 1]  # the draws that decided: accepts, then the reject
    if config.explain:
        _explain(record, q_probs, p_probs, config)


def _explain(record: RoundRecord, q_probs: torch.Tensor, p_probs: torch.Tensor | None, config: DecodeConfig) -> None:
    """The step-through view's numbers: alternatives per position and the residual (one host copy)."""
    k, n, top, device = record.k, record.accepted, config.explain, q_probs.device
    p_all = p_probs if p_probs is not None else torch.zeros_like(q_probs[:k])
    if p_probs is None and k:  # a deterministic drafter: p is one-hot on its proposal
        p_all[torch.arange(k, device=device), torch.tensor(record.draft_tokens, device=device)] = 1.0
    p_all = torch.cat([p_all, torch.zeros_like(q_probs[:1])])  # position k: no draft
    record.alternatives = []
    for i in range(n + 1):  # the positions the target evaluated: the kept drafts and the deciding one
        first = ([record.draft_tokens[i]] if i < k else []) + ([record.token] if i == n else [])
        first = list(dict.fromkeys(first))
        likely = torch.topk(
            torch.maximum(p_all[i], q_probs[i]), min(top + len(first), q_probs.shape[1])
        ).indices.tolist()
        ids = first + [t for t in likely if t not in first][:top]
        pq = torch.stack([p_all[i, ids], q_probs[i, ids]]).tolist()
        record.alternatives.append([(t, pq[0][j], pq[1][j]) for j, t in enumerate(ids)])
    if n < k and p_probs is not None and config.temperature > 0:
        r = residual(q_probs[n], p_probs[n])
        values, ids = torch.topk(r, min(top, r.shape[0]))
        record.residual = list(zip(ids.tolist(), values.tolist()))
