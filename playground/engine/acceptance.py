"""The acceptance rules, in one place, for every draft the engine verifies: a chain, a token tree drawn from a draft
model, and a set of deterministic candidates merged into a tree. As vLLM's rejection sampler does for every
proposer, this module decides the accepted drafts and the one token the target adds after them: the recovered
(correction) token after a rejection, or the bonus token when every draft was kept. Draft probabilities absent
(None) mean a deterministic draft: p is one-hot on each proposed token.

q: target prob, p: draft prob, k: draft length.
- a chain, greedy: the longest prefix equal to the target's argmax (chain_greedy; for B rows at once,
  batch_greedy); sampling: Leviathan et al. 2023 / Chen et al. 2023 (chain_sampling); the prefix rule itself
  (kept_prefix) is written once, here;
- a tree, greedy: the longest root-to-node path of target argmaxes (tree_greedy); sampling: recursive rejection
  sampling at each node over children drawn without replacement from p (select_child, Jeon et al. 2024), or,
  for deterministic candidates, each candidate kept with its renormalised q (select_candidate, SpecInfer's rule
  with one-hot drafts); tree_sampling walks down the tree with the rule its draft needs.
Everything but the final host reads stays on the device.
"""

from __future__ import annotations

from typing import Callable

import torch

from playground.core.draft import Tree, Verdict
from playground.engine.sampling import sample


# ---------------------------------------------------------------- a chain


def residual(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """norm(max(0, q - p)): where the correction token is drawn after a rejection.

    If q == p exactly the residual has no mass, but then nothing is ever rejected
    there; q is returned to keep the function total.
    """
    diff = (q - p).clamp_min(0.0)
    mass = diff.sum(-1, keepdim=True)
    return torch.where(mass > 0, diff / mass.clamp_min(1e-30), q)


def kept_prefix(accepted: torch.Tensor) -> torch.Tensor:
    """The prefix rule: how many drafts are kept, the length of the leading run of accepted ones along the last
    dimension ((k,) -> (), (B, k) -> (B,)); a draft after a rejected one is never kept."""
    return accepted.long().cumprod(-1).sum(-1)


def chain_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Accept the longest prefix where the draft equals the target's argmax.

    draft_tokens: (k,), target_logits: (k + 1, V). The next token is the target's argmax
    after the kept prefix, so the output is exactly target-only greedy decoding.
    """
    k = draft_tokens.shape[0]
    target_tokens = target_logits.argmax(-1)
    n = kept_prefix(draft_tokens == target_tokens[:k])
    return Verdict(num_accepted=n, next_token=target_tokens[n], u=None)


def batch_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """chain_greedy for B rows at once (batch.py): draft_tokens (B, k), target_logits (B, k + 1, V); each row keeps
    its own prefix. The Verdict's num_accepted and next_token are (B,)."""
    k = draft_tokens.shape[1]
    target_tokens = target_logits.argmax(-1)
    n = kept_prefix(draft_tokens == target_tokens[:, :k])
    return Verdict(num_accepted=n, next_token=target_tokens.gather(1, n[:, None])[:, 0], u=None)


def chain_sampling(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """The rejection-sampling rule of Leviathan et al. 2023 / Chen et al. 2023.

    q: target prob, p: draft prob. Accept draft token x_i with probability
    min(1, q_i(x_i) / p_i(x_i)); at the first rejection draw the correction from
    norm(max(0, q_i - p_i)); if all k are kept, draw a bonus token from q_k.
    draft_probs None means a deterministic drafter (p is one-hot on x_i).

    draft_tokens: (k,), draft_probs: (k, V) or None, target_probs: (k + 1, V).
    Everything stays on the device: the branch is an index, not a host decision.
    """
    k = draft_tokens.shape[0]
    positions = torch.arange(k, device=draft_tokens.device)
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:k])
        draft_probs[positions, draft_tokens] = 1.0
    q_x = target_probs[positions, draft_tokens]
    p_x = draft_probs[positions, draft_tokens]
    u = torch.rand(k, generator=generator, device=draft_tokens.device)
    n = kept_prefix(u * p_x < q_x)  # u < q/p, without dividing by p
    # Row i < k: the residual at a rejection in position i; row k: the bonus distribution.
    candidates = torch.cat([residual(target_probs[:k], draft_probs), target_probs[k:]], dim=0)
    next_token = sample(candidates[n], generator)
    return Verdict(num_accepted=n, next_token=next_token, u=u)


# ---------------------------------------------------------------- a tree (a model's draws or deterministic candidates)


def tree_greedy(tree: Tree, logits: torch.Tensor) -> tuple[list[int], int]:
    """The longest path of target argmaxes, and the target's argmax after it: (path nodes, token)."""
    best = logits.argmax(-1).tolist()
    path, row = [], 0
    while True:
        match = [c for c in tree.children[row] if tree.tokens[c] == best[row]]
        if not match:
            return path, best[row]
        path.append(match[0])
        row = match[0] + 1


def select_child(
    q: torch.Tensor, p: torch.Tensor, candidates: list[int], generator: torch.Generator | None
) -> tuple[int, int]:
    """Recursive rejection sampling at one node: candidates drawn from p without replacement, in draw
    order. Returns (index of the accepted candidate or -1, the token kept), the token following q."""
    r, p_i = q, p
    limits, ratios = [], []
    for x in candidates:
        ratios.append(r[x])
        limits.append(p_i[x])
        r = residual(r, p_i)  # where the next candidate (or the final draw) must put its mass
        p_i = p_i.clone()
        p_i[x] = 0.0
        p_i = p_i / p_i.sum().clamp_min(1e-30)  # the next draw's law: p without the drawn tokens
    u = torch.rand(len(candidates), generator=generator, device=q.device)
    fallback = sample(r, generator)
    if candidates:
        accepted = u * torch.stack(limits) < torch.stack(ratios)  # u < r(x) / p_i(x)
        verdict = torch.cat([accepted.long(), fallback.view(1)]).tolist()
    else:
        verdict = [fallback.item()]
    for i, ok in enumerate(verdict[:-1]):
        if ok:
            return i, candidates[i]
    return -1, verdict[-1]


def select_candidate(q: torch.Tensor, candidates: list[int], generator: torch.Generator | None) -> tuple[int, int]:
    """The sampling rule at one node (one-hot drafts): candidates are distinct token ids in their fixed
    order. Returns (index of the kept candidate or -1, the token kept). One host sync."""
    if not candidates:
        return -1, int(sample(q, generator).item())
    x = torch.tensor(candidates, device=q.device)
    qx = q[x]
    before = qx.cumsum(0) - qx  # the mass of the candidates refused before x_i
    keep = qx / (1.0 - before).clamp_min(1e-30)  # r_i(x_i): q(x_i) renormalised over what is left
    u = torch.rand(len(candidates), generator=generator, device=q.device)
    rest = q.clone()
    rest[x] = 0.0
    mass = rest.sum()
    fallback = sample(torch.where(mass > 0, rest / mass.clamp_min(1e-30), q), generator)  # all refused: r
    verdict = torch.cat([(u < keep).long(), fallback.view(1)]).tolist()
    for i, ok in enumerate(verdict[:-1]):
        if ok:
            return i, candidates[i]
    return -1, verdict[-1]


def tree_sampling(tree: Tree, q_rows: torch.Tensor, generator: torch.Generator | None) -> tuple[list[int], int]:
    """Walk down the tree, at each node the rule its draft needs (select_child for children drawn from p,
    select_candidate where p is absent: deterministic candidates): (the path's nodes, the final token: a
    correction or a bonus)."""
    if tree.p_rows is None:
        rule: Callable = lambda row, candidates: select_candidate(q_rows[row], candidates, generator)
    else:
        rule = lambda row, candidates: select_child(q_rows[row], tree.p_rows[row], candidates, generator)
    path, row = [], 0
    while True:
        kids = tree.children[row]
        index, token = rule(row, [tree.tokens[c] for c in kids])
        if index < 0:
            return path, token
        path.append(kids[index])
        row = kids[index] + 1


def accept_tree(
    tree: Tree, logits: torch.Tensor, q_rows: torch.Tensor, greedy: bool, generator: torch.Generator | None
) -> tuple[list[int], int]:
    """The accepted path and the token after it, greedy (from the target's logits) or sampled (from q)."""
    return tree_greedy(tree, logits) if greedy else tree_sampling(tree, q_rows, generator)
