"""Speculative decoding for B prompts at once: the survey's batch-size challenge, measured.

One draft/verify loop over a batch, greedy, fixed k; k = 0 is the target alone through the same loop
(the baseline a batched server would run); a session builds it warm (runner.Session.batch). It cuts at EOS and
at the token budget, and times, on the engine's one loop (engine.Loop, engine.cut). Each round the draft model
proposes k tokens for every sequence (B rows, one forward per token), the target scores each row's k + 1
positions in one pass, and each row keeps its own accepted prefix plus the target's token.

**The rule for rows that accept different numbers of tokens: per-row padding, never recompute.**
The batch's KV cache (target and draft alike, `PaddedCache`) is one (B, T) block of columns shared by
the rows; a boolean mask says which columns are real for each row. Prompts of different lengths are
left-padded. Every round appends the same columns to every row; where a row rejected drafts that
another row kept, its rejected columns stay in the block as holes, marked not real; columns that no row
kept are cropped from the end. Each token's position id is its row's count of real tokens before it
(not its column), and the attention mask (built here, 4D: column-causal AND real) lets a query see
only its own row's real tokens. So each row computes exactly what it would compute alone: the same
tokens at the same positions attend to the same keys; a masked key's softmax weight is exp(min - max),
which is 0 in floating point. Greedy acceptance (acceptance.batch_greedy, the chain rule row by row) keeps a
draft token only where it equals the target's argmax at that position, so each row's output is the target's
own greedy output. Lossless up to
rounding: a batched matrix product may sum in another order than a single row's; at a near-tie (top-2
logits closer than that rounding, mostly in bf16) the argmax can flip, and the margins recorded per
token (the target's top-1 minus top-2 logit) show where (sametext.compare_outputs tells a near-tie from a
real difference).

What the holes cost: attention over masked columns (compute, not results), and cache memory; both are
part of what batching speculative decoding costs. A finished row (EOS or its token budget) leaves the
batch, in both methods alike. An int8 (dynamically quantised) draft computes one activation scale over
the whole batch, so its proposals can depend on the other rows: that changes alpha, never the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import torch
from transformers import PreTrainedModel

from playground.engine.acceptance import batch_greedy
from playground.engine.cache import cache_bytes, crop_cache, draft_cache
from playground.engine.sampling import wide
from playground.engine import Loop, cut
from playground.core.errors import PlaygroundError


def left_pad(chunks: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths -> (ids, real), both (B, W): each row right-aligned, pads before it."""
    width = max(len(c) for c in chunks)
    ids = torch.full((len(chunks), width), pad, dtype=torch.long)
    real = torch.zeros((len(chunks), width), dtype=torch.bool)
    for b, chunk in enumerate(chunks):
        if chunk:
            ids[b, width - len(chunk) :] = torch.tensor(chunk, dtype=torch.long)
            real[b, width - len(chunk) :] = True
    return ids.to(device), real.to(device)


class PaddedCache:
    """One model's KV cache for B rows of their own lengths: the cache's columns, which of them are real
    per row, and each row's count of real tokens (its next position id)."""

    def __init__(self, model: PreTrainedModel, rows: int):
        self.model = model
        self.device = model.device
        self.cache = draft_cache(model)  # a DynamicCache whose layers can be cropped anywhere
        self.real = torch.zeros((rows, 0), dtype=torch.bool, device=self.device)
        self.length = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.dtype = model.get_input_embeddings().weight.dtype

    @property
    def columns(self) -> int:
        return self.real.shape[1]

    def mask(self, real_new: torch.Tensor) -> torch.Tensor:
        """The additive 4D mask (B, 1, W, T + W) of a pass that appends W columns: a query sees the real
        columns of its own row up to its own column; a pad query sees only itself (a row is never empty)."""
        width, old = real_new.shape[1], self.columns
        real = torch.cat([self.real, real_new], dim=1)
        keys = torch.arange(old + width, device=self.device)
        queries = torch.arange(old, old + width, device=self.device)
        allowed = real[:, None, :] & (keys[None, None, :] <= queries[None, :, None])
        allowed |= keys[None, None, :] == queries[None, :, None]
        additive = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return additive.masked_fill(~allowed, torch.finfo(self.dtype).min)[:, None]

    def forward(self, ids: torch.Tensor, real_new: torch.Tensor, keep: int) -> torch.Tensor:
        """Append W columns (ids and which are real, (B, W)); the logits of the last `keep` columns (B, keep, V)."""
        positions = self.length[:, None] + (real_new.long().cumsum(1) - 1).clamp_min(0)
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask(real_new),
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        self.real = torch.cat([self.real, real_new], dim=1)
        self.length += real_new.sum(1)
        return out.logits

    def drop_last(self, counts: list[int]) -> None:
        """Row b's last counts[b] real tokens were rejected: they become holes; columns no row keeps are cropped."""
        for b, n in enumerate(counts):
            if n > 0:
                where = self.real[b].nonzero().flatten()[-n:]
                self.real[b, where] = False
        self.length -= torch.tensor(counts, dtype=torch.long, device=self.device)
        kept = self.real.any(0).nonzero().flatten()
        end = int(kept[-1]) + 1 if len(kept) else 0
        if end < self.columns:
            crop_cache(self.cache, end)
            self.real = self.real[:, :end]

    def select(self, rows: list[int]) -> None:
        """Keep only these rows (the others finished)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.real, self.length = self.real[index], self.length[index]

    def nbytes(self) -> int:
        """Bytes the cache's keys and values take now (padding and holes included)."""
        return cache_bytes(self.cache)


@dataclass
class BatchRound:
    """One round of the batch: who took part and what each of them got."""

    round: int
    k: int  # tokens drafted per row this round (0: a plain target step)
    rows: list[int]  # the sequences (indices of the prompts) that took part
    accepted: list[int]  # per row that took part: draft tokens kept
    new_tokens: list[list[int]]  # per row that took part: tokens appended (cut at EOS / the token budget)
    draft_s: float
    verify_s: float
    columns: int = 0  # the target cache's columns after the round (real, padding and holes)
    kv_bytes: int = 0  # both caches' bytes after the round

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s


@dataclass
class BatchResult:
    """Every sequence's output and margins, and the rounds."""

    outputs: list[list[int]]
    margins: list[list[float]]  # per output token: the target's top-1 minus top-2 logit where it was decided
    rounds: list[BatchRound] = field(default_factory=list)


class BatchDrafter:
    """The draft model's side of a batch, greedy, on its own PaddedCache: a Drafter for B rows (propose, observe).
    Invariant between rounds, per row: its cache holds every real token of the row but `pending`."""

    def __init__(self, model: PreTrainedModel, prompts: list[list[int]], pad: int):
        self.kv = PaddedCache(model, len(prompts))
        self.pending = [list(p) for p in prompts]
        self.pad, self.device = pad, model.device

    def propose(self, rows: list[int], k: int) -> torch.Tensor:
        """k greedy draft tokens per row taking part, (B, k): one draft forward per token."""
        ids, real = left_pad([self.pending[i] for i in rows], self.pad, self.device)
        token = self.kv.forward(ids, real, keep=1)[:, -1].argmax(-1)
        tokens = [token]
        ones = torch.ones((len(rows), 1), dtype=torch.bool, device=self.device)
        for _ in range(k - 1):
            token = self.kv.forward(token[:, None], ones, keep=1)[:, -1].argmax(-1)
            tokens.append(token)
        return torch.stack(tokens, dim=1)

    def observe(self, rows: list[int], k: int, drafts: list[list[int]], accepted: list[int], tokens: list[int]) -> None:
        """Row b kept accepted[b] of its k drafts, then the target's tokens[b]."""
        for b, i in enumerate(rows):
            if k:  # the cache holds this round's drafts but the last: keep the accepted ones
                self.pending[i] = ([drafts[b][-1]] if accepted[b] == k else []) + [tokens[b]]
            else:  # a plain target step: the draft catches up on its next proposal
                self.pending[i].append(tokens[b])
        if k:
            self.kv.drop_last([max(0, k - 1 - n) for n in accepted])


class BatchedDecoder(Loop):
    """Greedy speculative decoding of B prompts together (k >= 1 with a draft model), or the target alone
    (k = 0 or no draft), through the engine's one loop (engine.Loop): propose (BatchDrafter), one target pass, the
    acceptance rule (acceptance.batch_greedy), the cut at EOS and the budget (engine.cut), on one clock.
    Invariant between rounds, per row: the target's cache holds every real token of the row but `pending` (the last)."""

    def __init__(
        self,
        target: PreTrainedModel,
        draft: PreTrainedModel | None,
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        eos: set[int],
        pad: int = 0,
    ):
        if not prompts or any(not p for p in prompts):
            raise PlaygroundError("A batch needs at least one prompt, and no prompt may be empty.")
        if k < 0 or (k > 0 and draft is None):
            raise PlaygroundError(f"k must be 0 (the target alone) or, with a draft model, >= 1; got {k}.")
        self.target, self.k = target, k if draft is not None else 0
        self.max_new, self.eos, self.pad = max_new_tokens, set(eos), pad
        self.device = target.device
        self.result = BatchResult([[] for _ in prompts], [[] for _ in prompts])
        self.active = list(range(len(prompts)))
        self.rows: list[int] = []  # the rows taking part in the round under way
        self.pending = [list(p) for p in prompts]
        self.target_kv = PaddedCache(target, len(prompts))
        self.drafter = BatchDrafter(draft, prompts, pad) if self.k else None

    @property
    def done(self) -> bool:
        return not self.active

    def run(self) -> BatchResult:
        for _ in self:
            pass
        return self.result

    def _plan(self) -> int:
        self.rows = list(self.active)
        budget = max(self.max_new - len(self.result.outputs[i]) for i in self.rows)  # >= 1
        return min(self.k, budget - 1)

    def _propose(self, k: int) -> torch.Tensor:
        if not k:
            return torch.empty((len(self.rows), 0), dtype=torch.long, device=self.device)
        return self.drafter.propose(self.rows, k)

    def _verify(self, drafts: torch.Tensor, k: int) -> tuple[list, list, list, list]:
        """The target's one pass over each row's pending token and drafts, and the acceptance rule: per row the
        drafts kept, the target's token after them, the margins (top-1 minus top-2 logit) and the drafts."""
        ids, real = left_pad([self.pending[i] for i in self.rows], self.pad, self.device)
        ids, real = torch.cat([ids, drafts], 1), torch.cat([real, torch.ones_like(drafts, dtype=torch.bool)], 1)
        logits = wide(self.target_kv.forward(ids, real, keep=k + 1))  # (B, k + 1, V)
        verdict = batch_greedy(drafts, logits)  # each row's kept prefix and the target's token after it
        top2 = torch.topk(logits, 2, dim=-1).values
        return (
            verdict.num_accepted.tolist(),
            verdict.next_token.tolist(),
            (top2[..., 0] - top2[..., 1]).tolist(),
            drafts.tolist(),
        )  # the host sync

    def _keep(self, verdict: tuple[list, list, list, list], draft_s: float, verify_s: float) -> BatchRound:
        n_list, token_list, gaps, draft_list = verdict
        rows, k = self.rows, len(draft_list[0])
        record = BatchRound(len(self.result.rounds), k, rows, n_list, [], draft_s, verify_s)
        finished = []
        for b, i in enumerate(rows):
            n, token = n_list[b], token_list[b]
            new, stop = cut(draft_list[b][:n] + [token], self.eos, self.max_new - len(self.result.outputs[i]))
            self.result.outputs[i] += new
            self.result.margins[i] += gaps[b][: len(new)]
            record.new_tokens.append(new)
            if stop:
                finished.append(b)
            self.pending[i] = [token]
        self.target_kv.drop_last([k - n for n in n_list])
        if self.drafter is not None:
            self.drafter.observe(rows, k, draft_list, n_list, token_list)
        if finished:
            self._leave(rows, finished)
        record.columns = self.target_kv.columns
        record.kv_bytes = self.target_kv.nbytes() + (self.drafter.kv.nbytes() if self.drafter else 0)
        self.result.rounds.append(record)
        return record

    def _leave(self, rows: list[int], finished: list[int]) -> None:
        """Finished rows (EOS or their budget) leave the batch and both caches."""
        keep = [b for b in range(len(rows)) if b not in finished]
        self.active = [rows[b] for b in keep]
        if keep:
            self.target_kv.select(keep)
            if self.drafter is not None:
                self.drafter.kv.select(keep)


def decode_batch(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    prompts: list[list[int]],
    k: int,
    max_new_tokens: int,
    eos: set[int],
    pad: int = 0,
) -> BatchResult:
    """Run a batch to the end (BatchedDecoder)."""
    return BatchedDecoder(target, draft, prompts, k, max_new_tokens, eos, pad).run()
