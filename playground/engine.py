"""The one decoding loop: draft, verify in one target pass, keep the accepted prefix.

Used by the UI, the benchmark and the tests alike. The autoregressive baseline is the
same loop with a drafter that proposes nothing, so both are timed the same way.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Iterator

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.drafters import Drafter, crop_cache
from playground.errors import PlaygroundError
from playground.sampling import SamplingParams, logits_to_probs, verify_greedy, verify_sampling

K_MIN, K_MAX = 1, 16
K_POLICIES = ("heuristic", "theory")
MAX_NEW_TOKENS = int(os.environ.get("PLAYGROUND_MAX_NEW_TOKENS", 1024))  # the largest max_new_tokens accepted


@dataclass
class DecodeConfig:
    max_new_tokens: int = 64
    k: int = 4  # draft length; with adaptive, the starting value
    adaptive: bool = False  # let the k policy change k between rounds
    policy: str = "heuristic"  # with adaptive: "heuristic" or "theory" (see KSchedule)
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    record: bool = True  # compute p and q of every draft token for the views
    explain: int = 0  # > 0: also record that many top alternatives per position and the residual (step-through)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)

    def validate(self) -> None:
        """Raise PlaygroundError with a readable message for any value out of range."""
        def is_int(x) -> bool:
            return isinstance(x, int) and not isinstance(x, bool) or (isinstance(x, float) and x.is_integer())

        if not is_int(self.k) or not K_MIN <= self.k <= K_MAX:
            raise PlaygroundError(f"k (draft length) must be a whole number from {K_MIN} to {K_MAX}, got {self.k!r}.")
        if not is_int(self.max_new_tokens) or not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise PlaygroundError(f"max_new_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {self.max_new_tokens!r}.")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or not 0 <= self.temperature <= 2:
            raise PlaygroundError(f"temperature must be from 0 to 2 (0 = greedy), got {self.temperature!r}.")
        if not isinstance(self.top_p, (int, float)) or not math.isfinite(self.top_p) or not 0 < self.top_p <= 1:
            raise PlaygroundError(f"top_p must be in (0, 1], got {self.top_p!r}.")
        if self.policy not in K_POLICIES:
            raise PlaygroundError(f"The k policy must be one of {', '.join(K_POLICIES)}, got {self.policy!r}.")
        if not is_int(self.top_k) or self.top_k < 0:
            raise PlaygroundError(f"top_k must be a whole number >= 0 (0 = off), got {self.top_k!r}.")
        if not is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise PlaygroundError(f"seed must be a whole number from 0 to 2**63 - 1, got {self.seed!r}.")
        self.k, self.max_new_tokens, self.top_k, self.seed = int(self.k), int(self.max_new_tokens), int(self.top_k), int(self.seed)
        self.temperature, self.top_p = float(self.temperature), float(self.top_p)


@dataclass
class RoundRecord:
    """One draft/verify round, as it happened."""

    round: int
    k: int  # tokens drafted this round (0 for a plain target step)
    draft_tokens: list[int]
    accepted: int  # n: how many of draft_tokens the target kept
    token: int  # the target's own token after the kept prefix
    token_kind: str  # "correction" (n < k), "bonus" (n == k > 0) or "target" (k == 0)
    new_tokens: list[int]  # appended to the output this round (cut at EOS / the token limit)
    draft_s: float
    verify_s: float
    total_new: int  # output length after this round
    p: list[float] = field(default_factory=list)  # draft prob of each draft token
    q: list[float] = field(default_factory=list)  # target prob of each draft token
    u: list[float] = field(default_factory=list)  # uniform draws of the rule (sampling only)
    token_q: float = float("nan")  # target prob of `token`
    # With DecodeConfig.explain: per position 0..k, [(token, p, q)], the position's own token first
    # (the draft token; at position k, the bonus), then the likeliest others under p or q;
    # and the residual norm(max(0, q - p)) at the rejected position, [(token, r)], when sampling.
    alternatives: list[list[tuple[int, float, float]]] = field(default_factory=list)
    residual: list[tuple[int, float]] = field(default_factory=list)
    stop: str = ""  # "eos", "length" when this round ended the run


class KSchedule:
    """Draft length per round.

    - fixed (adaptive off): always k.
    - "heuristic": transformers' schedule, +2 after a fully accepted round, -1 otherwise.
    - "theory": the k that maximises Leviathan et al.'s expected tokens per unit of time,
      E(alpha, k) / (k * d + V(k + 1)), from what this run measured so far: alpha (accepted /
      evaluated, with a uniform prior), d (draft seconds per token) and V(n) (seconds to verify n
      tokens at once). V is measured per n because on CPUs it is not flat (MKL's kernels change
      at 4 rows); an n not measured yet borrows the nearest measured one.
    All stay within [K_MIN, K_MAX].
    """

    def __init__(self, k: int, adaptive: bool, policy: str = "heuristic"):
        self.k, self.adaptive, self.policy = k, adaptive, policy
        self.accepted = self.evaluated = 0
        self.draft_s = 0.0
        self.drafted = 0
        self.verify_s: dict[int, float] = {}  # n verified -> EMA of seconds

    def update(self, drafted: int, accepted: int, draft_s: float = 0.0, verify_s: float = 0.0) -> None:
        if not self.adaptive or drafted == 0:
            return
        if self.policy != "theory":
            self.k = min(K_MAX, self.k + 2) if accepted == drafted else max(K_MIN, self.k - 1)
            return
        self.accepted += accepted
        self.evaluated += min(drafted, accepted + 1)
        self.draft_s += draft_s
        self.drafted += drafted
        n = drafted + 1
        old = self.verify_s.get(n)
        self.verify_s[n] = verify_s if old is None else 0.7 * old + 0.3 * verify_s
        alpha = (self.accepted + 1) / (self.evaluated + 2)
        d = self.draft_s / self.drafted

        def verify_cost(n: int) -> float:
            nearest = min(self.verify_s, key=lambda m: (abs(m - n), -m))
            return self.verify_s[nearest]

        def rate(k: int) -> float:
            expected = (k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
            return expected / (k * d + verify_cost(k + 1))

        self.k = max(range(K_MIN, K_MAX + 1), key=rate)


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class SpeculativeDecoder:
    """State of one generation: both KV caches, the sequence, the k schedule.

    `step()` runs one round and returns its record; iterating runs to the end.
    Invariant between rounds: each cache holds every position of `ids` but the last.
    """

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: Drafter,
        input_ids: torch.Tensor,
        config: DecodeConfig,
        eos_token_ids: set[int] | None = None,
    ):
        config.validate()
        if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
            raise PlaygroundError("The prompt is empty: type something to continue.")
        window = getattr(target.config, "max_position_embeddings", None)
        if window and input_ids.shape[1] + config.max_new_tokens > window:
            raise PlaygroundError(
                f"Prompt ({input_ids.shape[1]} tokens) plus max_new_tokens ({config.max_new_tokens}) "
                f"exceeds the model's context window of {window} tokens."
            )
        self.target, self.drafter, self.config = target, drafter, config
        self.device = target.device
        self.ids = input_ids.to(self.device)
        self.prompt_len = input_ids.shape[1]
        if eos_token_ids is None:  # default: what the target's generation config says
            eos = target.generation_config.eos_token_id
            eos_token_ids = {eos} if isinstance(eos, int) else set(eos or ())
        self.eos = set(eos_token_ids)
        self.params = config.sampling
        self.schedule = KSchedule(config.k, config.adaptive, config.policy)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.cache = DynamicCache(config=target.config)
        self.cached = 0
        self.rounds: list[RoundRecord] = []
        self.done = False
        drafter.reset()

    @property
    def new_tokens(self) -> list[int]:
        return self.ids[0, self.prompt_len :].tolist()

    def __iter__(self) -> Iterator[RoundRecord]:
        while not self.done:
            yield self.step()

    @torch.inference_mode()
    def step(self) -> RoundRecord:
        if self.done:
            raise RuntimeError("generation already finished")
        cfg, params = self.config, self.params
        length = self.ids.shape[1]
        generated = length - self.prompt_len
        budget = cfg.max_new_tokens - generated  # >= 1
        k = min(self.schedule.k, budget - 1)  # a round yields at most k + 1 tokens

        t0 = _clock(self.device)
        draft = self.drafter.propose(self.ids, k, params, self.generator)
        t1 = _clock(self.device)

        drafted = draft.tokens.shape[0]
        feed = torch.cat([self.ids[:, self.cached :], draft.tokens.view(1, -1)], dim=1)
        logits = self.target(input_ids=feed, cache=self.cache, use_cache=True, logits_to_keep=drafted + 1).logits[0]
        if params.greedy:
            verdict = verify_greedy(draft.tokens, logits)
            q_probs = p_probs = None
        else:
            q_probs = logits_to_probs(logits, params)
            p_probs = None if draft.logits is None else logits_to_probs(draft.logits, params)
            verdict = verify_sampling(draft.tokens, p_probs, q_probs, self.generator)
        ints = torch.cat([verdict.num_accepted.view(1), verdict.next_token.view(1), draft.tokens]).tolist()  # the host sync
        n, token, draft_tokens = ints[0], ints[1], ints[2:]
        record = RoundRecord(
            round=len(self.rounds), k=drafted, draft_tokens=draft_tokens, accepted=n, token=token,
            token_kind="target" if drafted == 0 else ("bonus" if n == drafted else "correction"),
            new_tokens=[], draft_s=t1 - t0, verify_s=0.0, total_new=0,
        )
        if cfg.record:
            self._record_probs(record, draft, logits, p_probs, q_probs, verdict)
        t2 = _clock(self.device)
        record.verify_s = t2 - t1

        new = draft_tokens[:n] + [token]
        for i, t in enumerate(new):
            if t in self.eos:
                new, record.stop = new[: i + 1], "eos"
                break
        self.ids = torch.cat([self.ids, torch.tensor([new], dtype=self.ids.dtype, device=self.device)], dim=1)
        record.new_tokens = new
        record.total_new = self.ids.shape[1] - self.prompt_len
        if not record.stop and record.total_new >= cfg.max_new_tokens:
            record.stop = "length"
        self.done = bool(record.stop)

        # Keep the caches to the accepted prefix: drop the rejected drafts, never recompute.
        self.cached = length + n
        crop_cache(self.cache, self.cached)
        self.drafter.observe(n)
        self.schedule.update(drafted, n, record.draft_s, record.verify_s)
        self.rounds.append(record)
        return record

    def _record_probs(self, record, draft, logits, p_probs, q_probs, verdict) -> None:
        """p and q of each draft token (and q of the target's token) for the views."""
        k = record.k
        if q_probs is None:
            q_probs = torch.softmax(logits.float(), -1)
        if p_probs is None and draft.logits is not None:
            p_probs = torch.softmax(draft.logits.float(), -1)
        idx = torch.arange(k, device=self.device)
        tokens = draft.tokens
        q = q_probs[idx, tokens]
        p = p_probs[idx, tokens] if p_probs is not None else torch.ones_like(q)
        token_q = q_probs[verdict.num_accepted, verdict.next_token].view(1)
        u = verdict.u if verdict.u is not None else q.new_empty(0)
        floats = torch.cat([p, q, token_q, u.float()]).tolist()
        record.p, record.q, record.token_q = floats[:k], floats[k : 2 * k], floats[2 * k]
        record.u = floats[2 * k + 1 :][: record.accepted + 1]  # the draws that decided: accepts, then the reject
        if self.config.explain:
            self._explain(record, q_probs, p_probs, self.config.explain)

    def _explain(self, record, q_probs, p_probs, top: int) -> None:
        """The step-through view's numbers: alternatives per position and the residual (one host copy)."""
        k, n = record.k, record.accepted
        p_all = p_probs if p_probs is not None else torch.zeros_like(q_probs[:k])
        if p_probs is None and k:  # a deterministic drafter: p is one-hot on its proposal
            p_all[torch.arange(k, device=self.device), torch.tensor(record.draft_tokens, device=self.device)] = 1.0
        p_all = torch.cat([p_all, torch.zeros_like(q_probs[:1])])  # position k: no draft
        record.alternatives = []
        for i in range(n + 1):  # the positions the target evaluated: the kept drafts and the deciding one
            first = ([record.draft_tokens[i]] if i < k else []) + ([record.token] if i == n else [])
            first = list(dict.fromkeys(first))
            likely = torch.topk(torch.maximum(p_all[i], q_probs[i]), min(top + len(first), q_probs.shape[1])).indices.tolist()
            ids = first + [t for t in likely if t not in first][:top]
            pq = torch.stack([p_all[i, ids], q_probs[i, ids]]).tolist()
            record.alternatives.append([(t, pq[0][j], pq[1][j]) for j, t in enumerate(ids)])
        if n < k and p_probs is not None and self.params.temperature > 0:
            r = (q_probs[n] - p_probs[n]).clamp_min(0)
            r = r / r.sum()
            values, ids = torch.topk(r, min(top, r.shape[0]))
            record.residual = list(zip(ids.tolist(), values.tolist()))


def generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    config: DecodeConfig,
    eos_token_ids: set[int] | None = None,
) -> Iterator[RoundRecord]:
    """Stream the rounds of one generation."""
    return iter(SpeculativeDecoder(target, drafter, input_ids, config, eos_token_ids))
