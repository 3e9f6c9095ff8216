"""Tiny random model pairs, built and saved locally: for tests, the browser test and
offline demos of the UI mechanics. No weights are downloaded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Once upon a time there was a little fox who lived in the forest near a river.",
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens and the target verifies them.",
    "Question: what is the capital of France? Answer: Paris is the capital of France.",
    "for i in range(10):\n    print(i * i)\nimport numpy as np\nx = np.zeros(3)\n",
] * 20


def build_tokenizer(folder: Path, vocab_size: int = 320) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    return fast


def build_metaspace_tokenizer(folder: Path, vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """A second kind of tokenizer, for cross-tokenizer pairs: SentencePiece-style (spaces as "▁", BPE
    merges of its own, an <unk> for characters outside the corpus), so that its tokens, their ids and
    where they cut words all differ from build_tokenizer's."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="never")
    alphabet = sorted(
        set("".join(CORPUS))
        | set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?()+-*/=<>_'\"\n")
    )
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["</s>", "<unk>"], initial_alphabet=alphabet)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", bos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return fast


def train_on_corpus(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, steps: int = 150, seed: int = 0
) -> LlamaForCausalLM:
    """A few Adam steps on the corpus: two models trained this way on two tokenizers agree on text
    (both continue the corpus), which cross-tokenizer drafting needs to accept anything."""
    torch.manual_seed(seed)
    texts = list(dict.fromkeys(CORPUS))
    rows = [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.eos_token_id] * (width - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is several times faster than two on a busy machine
    model.train()
    try:
        for _ in range(steps):
            optimizer.zero_grad()
            model(input_ids=ids, labels=labels).loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def build_model(
    folder: Path,
    vocab_size: int,
    eos: int,
    seed: int,
    layers: int = 2,
    hidden: int = 64,
    base: LlamaForCausalLM | None = None,
    noise: float = 0.0,
    save: bool = True,
) -> LlamaForCausalLM:
    """A random Llama; with `base`, a copy of it with Gaussian noise added to the LM head (a draft that agrees often, not always)."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if base is not None:
        model.load_state_dict(base.state_dict())
        with torch.no_grad():
            head = model.lm_head.weight  # perturb the head only: the draft then agrees often, not always
            head.add_(noise * head.std() * torch.randn_like(head))
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    if save:
        model.save_pretrained(folder, safe_serialization=True)
    return model


def build_pair(root: Path) -> dict[str, Path]:
    """root/target, root/draft (a noisy copy), root/twin (identical to target), root/small-draft (unrelated)."""
    root = Path(root)
    folders = {name: root / name for name in ("target", "draft", "twin", "other")}
    tok = build_tokenizer(folders["target"])
    eos = tok.eos_token_id
    target = build_model(folders["target"], len(tok), eos, seed=0)
    build_model(folders["draft"], len(tok), eos, seed=1, base=target, noise=0.3)
    build_model(folders["twin"], len(tok), eos, seed=0, base=target, noise=0.0)
    other_tok = build_tokenizer(folders["other"], vocab_size=280)
    build_model(folders["other"], len(other_tok), other_tok.eos_token_id, seed=2, layers=1, hidden=32)
    for name in ("draft", "twin"):
        tok.save_pretrained(folders[name])
    return folders


def build_cross_pair(root: Path, soften: float = 0.3) -> dict[str, Path]:
    """root/cross-target (build_tokenizer's byte-level BPE) and root/cross-draft (a Metaspace BPE of
    its own: different tokens and ids), both trained briefly on the corpus so that they agree on text.
    Their LM heads are then scaled by `soften`: the same argmax, flatter distributions (a memorised
    corpus would leave sampling nearly deterministic, and a rule's errors invisible)."""
    root = Path(root)
    folders = {"target": root / "cross-target", "draft": root / "cross-draft"}
    target_tok = build_tokenizer(folders["target"])
    draft_tok = build_metaspace_tokenizer(folders["draft"])
    for name, tok, seed, layers, hidden in (("target", target_tok, 3, 2, 64), ("draft", draft_tok, 4, 1, 48)):
        model = build_model(
            folders[name], len(tok), tok.eos_token_id, seed=seed, layers=layers, hidden=hidden, save=False
        )
        train_on_corpus(model, tok, seed=seed)
        with torch.no_grad():
            model.lm_head.weight.mul_(soften)
        model.save_pretrained(folders[name], safe_serialization=True)
    return folders


def write_pairs_file(root: Path, cross: bool = False) -> Path:
    """A PLAYGROUND_PAIRS_FILE naming the tiny pairs; with cross, also the tiny cross-tokenizer pair."""
    folders = build_pair(root)
    pairs = [
        {"name": "tiny (test)", "draft": str(folders["draft"]), "target": str(folders["target"])},
        {"name": "tiny twin (test)", "draft": str(folders["twin"]), "target": str(folders["target"])},
    ]
    if cross:
        folders = build_cross_pair(root)
        pairs.append(
            {
                "name": "tiny cross-tokenizer (test)",
                "draft": str(folders["draft"]),
                "target": str(folders["target"]),
                "drafter": "cross-tokenizer draft model",
                "note": "Cross-tokenizer: a Metaspace BPE draft for a byte-level BPE target.",
            }
        )
    path = Path(root) / "pairs.json"
    path.write_text(json.dumps(pairs, indent=1))
    return path


if __name__ == "__main__":  # python -m playground.models.tiny DIR
    print(write_pairs_file(Path(sys.argv[1]), cross=True))
