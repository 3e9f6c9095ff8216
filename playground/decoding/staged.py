"""Staged drafting: the draft model's own proposals are drafted by a cheaper source, prompt
lookup, and verified by the draft model before the target verifies the result: a two-level cascade
(Spector & Re 2023, "Accelerating LLM Inference with Staged Speculative Decoding"; Chen et al. 2024,
"Cascade Speculative Drafting").

q: target prob, p: draft prob. Within one round, until k tokens are drafted: prompt lookup proposes up to
the tokens still wanted, g_1..g_m, after the sequence and what is drafted so far; the draft model scores
them in one forward pass (on top of its KV cache, kept as ModelDrafter keeps it: it is one); the first level keeps a
prefix of them and adds one token of the draft model's own. It verifies with the same rule as the
second level (acceptance.chain_greedy / chain_sampling, prompt lookup as a deterministic drafter: its
proposal one-hot), the draft model in the target's role:
- greedy: the longest prefix equal to the draft's argmax, then the draft's argmax: exactly the tokens
  the draft model alone would draft;
- sampling: g_j kept with probability p_j(g_j), else a draw from norm(max(p_j - onehot(g_j), 0)); after
  a fully kept proposal a draw from p: every drafted token is a draw from the draft's p at its position,
  as ModelDrafter's are.
So the Draft carries the draft model's logits for every drafted position, and the target's verification
is exactly what it is for the draft model alone (lossless, greedy and sampling). What changes is the
cost: one draft pass that scores m lookup tokens yields up to m + 1 draft tokens, instead of one.
The confidence policy's early stop does not apply here: a staged draft is always k long.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.engine.cache import crop_cache
from playground.decoding.lookup import lookup
from playground.decoding.model import ModelDrafter
from playground.core.records import RoundRecord, StagedExtras
from playground.core.config import SamplingParams
from playground.engine.acceptance import chain_greedy, chain_sampling
from playground.engine.sampling import logits_to_probs


class StagedDrafter(ModelDrafter):
    """Prompt lookup drafts for the draft model; the draft model's kept tokens draft for the target. Its KV
    cache and observe() are the model drafter's."""

    name = DrafterKind.STAGED.value

    def __init__(self, model: PreTrainedModel, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        super().__init__(model)

    def reset(self) -> None:
        super().reset()  # self.cached: positions of the sequence (and of the last proposal) held in the cache
        self.proposed = self.kept = self.passes = 0  # the last round's first level

    @torch.inference_mode()
    def propose(
        self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> ChainDraft:
        self.proposed = self.kept = self.passes = 0
        if k == 0:
            return super().propose(ids, 0, params, generator)  # nothing proposed
        seq = ids[0].tolist()  # prompt lookup reads the whole sequence, the draft model its context
        ids = self.context(ids)
        drafted: list[int] = []
        rows: list[torch.Tensor] = []  # the draft's logits at each drafted position
        feed = ids[:, self.cached :]
        while len(drafted) < k:
            guess = lookup(seq + drafted, k - len(drafted), self.max_ngram, self.min_ngram)
            m = len(guess)
            g = torch.tensor(guess, dtype=ids.dtype, device=ids.device)
            logits = self.model(
                input_ids=torch.cat([feed, g.view(1, -1)], dim=1),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=m + 1,
            ).logits[0]  # row j: p after the sequence, drafts and g_1..g_j
            self.passes += 1
            if params.greedy:
                verdict = chain_greedy(g, logits)
            else:
                verdict = chain_sampling(g, None, logits_to_probs(logits, params), generator)
            n, token = torch.stack([verdict.num_accepted, verdict.next_token]).tolist()  # the host sync
            self.proposed, self.kept = self.proposed + m, self.kept + n
            crop_cache(self.cache, self.cache.get_seq_length() - (m - n))  # drop the rejected lookup tokens
            drafted += guess[:n]
            rows.append(logits[:n])
            if len(drafted) < k:  # the draft model's own token: a correction, or a bonus after a kept proposal
                drafted.append(token)
                rows.append(logits[n : n + 1])
                feed = torch.tensor([[token]], dtype=ids.dtype, device=ids.device)
        # The cache holds the sequence and the drafts, all but the last unless a kept proposal ended the draft.
        self.cached = self.cache.get_seq_length()
        self.proposal_start = ids.shape[1]
        return ChainDraft(torch.tensor(drafted, dtype=ids.dtype, device=ids.device), torch.cat(rows))

    def annotate(self, record: RoundRecord) -> None:
        """The first level of the round in its record."""
        record.extras = StagedExtras(self.proposed, self.kept, self.passes)
