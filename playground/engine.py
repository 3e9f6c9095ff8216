"""The one decoding loop: draft, verify in one target pass, keep the accepted prefix.

Used by the UI, the benchmark and the tests alike. The autoregressive baseline is the
same loop with a drafter that proposes nothing, so both are timed the same way.
"""
from __future__ import annotations

import time
from typing import Iterator

import torch
from transformers import DynamicCache, PreTrainedModel

from playground import theory, tree
from playground.drafters import Drafter, ModelDrafter, crop_cache
from playground.errors import PlaygroundError
from playground.records import RoundRecord
from playground.sampling import logits_to_probs, verify_greedy, verify_sampling
from playground.spec import K_MAX, K_MIN, DecodeConfig, KPolicy

PROBE_EVERY = 8  # THEORY's pause drafts one probe token after this many plain steps in a row


class KSchedule:
    """Draft length per round.

    - FIXED: always k.
    - CONFIDENCE: always k, as the most a draft may hold: the model drafter itself stops a draft when
      its top probability falls under DecodeConfig.confidence (runner.make_drafter sets it).
    - HEURISTIC: transformers' schedule, +2 after a fully accepted round, -1 otherwise.
    - THEORY: the k in 0..K_MAX with the best calibrated expected speedup,
      E(alpha, k) / (k c + v(k)) (theory.calibrated_speedup), for alpha estimated from this run's
      recent rounds and the costs of a CostProfile. k = 0 (a plain target step) is allowed: when
      drafting does not pay, the run stops drafting, and tries again as the evidence decays
      (theory.AcceptanceEstimate): the floor that keeps it at about the target alone's speed. After
      PROBE_EVERY plain steps in a row it drafts one token (a probe): without new evidence the estimate
      would rest at its prior, and a pause chosen on a costly start (a slow warm-up) would never end.
      With a profile fixed at the start (the runner measures one per model and drafter), the k
      sequence depends only on the accepted counts, so a seeded run is reproducible; without
      one, the profile is built from this run's own timings (and then depends on them).
    All but THEORY's pause stay within [K_MIN, K_MAX].
    """

    def __init__(self, k: int, policy: KPolicy = KPolicy.FIXED, profile: theory.CostProfile | None = None):
        self.k, self.policy, self.profile = k, KPolicy(policy), profile
        self.alpha = theory.AcceptanceEstimate()
        self._draft_s = 0.0
        self._drafted = 0
        self._plain = 0  # rounds in a row THEORY chose not to draft
        self._verify_s: dict[int, float] = {}  # n -> EMA of seconds, when no profile was given

    def update(self, drafted: int, accepted: int, draft_s: float = 0.0, verify_s: float = 0.0,
               first: bool = False) -> None:
        if self.policy in (KPolicy.FIXED, KPolicy.CONFIDENCE):
            return
        if self.policy is KPolicy.HEURISTIC:
            if drafted:
                self.k = min(K_MAX, self.k + 2) if accepted == drafted else max(K_MIN, self.k - 1)
            return
        self.alpha.update(drafted, accepted)
        profile = self.profile or self._own_profile(drafted, draft_s, verify_s, first)
        if profile is None:
            return
        c = profile.c if self.profile else self._draft_s / max(1, self._drafted) / profile.step_s
        self.k = theory.best_k_calibrated(self.alpha.alpha, c, profile, K_MAX, k_min=0)
        self._plain = self._plain + 1 if self.k == 0 else 0
        if self._plain > PROBE_EVERY:  # a pause that has lasted: draft one token to learn this text's alpha again
            self.k, self._plain = 1, 0

    def _own_profile(self, drafted: int, draft_s: float, verify_s: float, first: bool) -> theory.CostProfile | None:
        """A profile from this run's timings (the first round's pass includes the prompt: skipped)."""
        self._draft_s += draft_s
        self._drafted += drafted
        if not first:
            n = drafted + 1
            old = self._verify_s.get(n)
            self._verify_s[n] = verify_s if old is None else 0.7 * old + 0.3 * verify_s
        return theory.CostProfile(dict(self._verify_s)) if self._verify_s else None


def clock(device: torch.device) -> float:
    """perf_counter after the device's queued work is done (CUDA runs asynchronously)."""
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
        profile: theory.CostProfile | None = None,
    ):
        """profile: the costs the THEORY k policy plans with (fixed for the run; see KSchedule)."""
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
        self.schedule = KSchedule(config.k, config.policy, profile)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.cache = DynamicCache(config=target.config)
        self.cached = 0
        self.rounds: list[RoundRecord] = []
        self.done = False
        if config.tree is not None:
            if not isinstance(drafter, ModelDrafter):
                raise PlaygroundError(f"A token tree needs a model drafter; '{drafter.name}' drafts a chain only.")
            tree.check_tree_model(target)
            tree.check_tree_model(drafter.model, "draft")
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
        if cfg.tree is not None and budget > 1:  # a token tree instead of a chain (its shape sets the depth)
            return self._finish(self._tree_round(min(cfg.tree.depth, budget - 1)), length)
        k = min(self.schedule.k, budget - 1)  # a round yields at most k + 1 tokens

        t0 = clock(self.device)
        draft = self.drafter.propose(self.ids, k, params, self.generator)
        t1 = clock(self.device)

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
            new_tokens=[], draft_s=t1 - t0, verify_s=0.0, total_new=0, prefill=feed.shape[1] - drafted - 1,
        )
        if cfg.record:
            self._record_probs(record, draft, logits, p_probs, q_probs, verdict)
        t2 = clock(self.device)
        record.verify_s = t2 - t1

        # Keep the caches to the accepted prefix: drop the rejected drafts, never recompute.
        crop_cache(self.cache, length + n)
        self.drafter.observe(n)
        if hasattr(self.drafter, "annotate"):  # the cross-tokenizer drafter adds its side of the round
            self.drafter.annotate(record)
        self.schedule.update(drafted, n, record.draft_s, record.verify_s, first=record.round == 0)
        return self._finish(record, length)

    def _finish(self, record: RoundRecord, length: int) -> RoundRecord:
        """Append the round's kept tokens (cut at EOS and at the token limit) and record it."""
        new = record.draft_tokens[: record.accepted] + [record.token]
        for i, t in enumerate(new):
            if t in self.eos:
                new, record.stop = new[: i + 1], "eos"
                break
        self.ids = torch.cat([self.ids, torch.tensor([new], dtype=self.ids.dtype, device=self.device)], dim=1)
        record.new_tokens = new
        record.margins = record.margins[: len(new)]
        record.total_new = self.ids.shape[1] - self.prompt_len
        if not record.stop and record.total_new >= self.config.max_new_tokens:
            record.stop = "length"
        self.done = bool(record.stop)
        self.cached = length + record.accepted  # the caches hold every position of ids but the last
        self.rounds.append(record)
        return record

    def _tree_round(self, depth: int) -> RoundRecord:
        """Draft a token tree, score all its nodes in one target pass, keep the accepted path (tree.py)."""
        length, params = self.ids.shape[1], self.params
        t0 = clock(self.device)
        drafted = tree.draft_tree(self.drafter, self.ids, self.config.tree, depth, params, self.generator)
        t1 = clock(self.device)
        logits = tree.score_tree(self.target, self.cache, self.ids, self.cached, drafted)
        q_rows = logits_to_probs(logits, params)
        if params.greedy:
            path, token = tree.verify_tree_greedy(drafted, logits)
        else:
            path, token = tree.verify_tree_sampling(drafted, q_rows, self.generator)
        # Both caches keep exactly the accepted path: its entries gathered into place, the rest cropped.
        tree.keep_path(self.cache, length, [length + i for i in path])
        fed = [length + i for i in path if i < drafted.fed]
        tree.keep_path(self.drafter.cache, length, fed)
        self.drafter.cached = length + len(fed)
        record = tree.tree_record(drafted, path, token, q_rows, len(self.rounds), length - self.cached - 1)
        record.draft_s, record.verify_s = t1 - t0, clock(self.device) - t1
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
        if self.params.greedy:  # how close each decision was: top-1 minus top-2 logit per position
            top2 = torch.topk(logits.float(), 2, dim=-1).values
            margins = top2[:, 0] - top2[:, 1]
        else:
            margins = q.new_empty(0)
        floats = torch.cat([p, q, token_q, margins, u.float()]).tolist()
        record.p, record.q, record.token_q = floats[:k], floats[k : 2 * k], floats[2 * k]
        m = len(margins)
        record.margins = floats[2 * k + 1 : 2 * k + 1 + m][: record.accepted + 1]  # the positions whose tokens were kept
        record.u = floats[2 * k + 1 + m :][: record.accepted + 1]  # the draws that decided: accepts, then the reject
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
    profile: theory.CostProfile | None = None,
) -> Iterator[RoundRecord]:
    """Stream the rounds of one generation."""
    return iter(SpeculativeDecoder(target, drafter, input_ids, config, eos_token_ids, profile))
