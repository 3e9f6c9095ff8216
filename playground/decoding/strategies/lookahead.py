"""Lookahead decoding: the target's own Jacobi window fills an n-gram pool, verified in the same pass. Its
options: the window W, the n-gram size N, the verification budget G, the prompt pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import NONE, Context, Peer, Strategy, Widget, flag, typed, whole
from playground.core.errors import PlaygroundError

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

# W, N and G sized for a CPU pass of about 16 tokens (docs/draft-free.md); the paper's GPU settings (W 15, N 5,
# G 15) score about 140 tokens a pass.
DEFAULTS = (5, 3, 3)
RANGES = {
    "lookahead_window": (1, 16, "the window W"),
    "lookahead_ngram": (2, 8, "the n-gram size N"),
    "lookahead_guesses": (1, 16, "the verification budget G (n-grams verified per round)"),
}
MAX_WIDTH = 128  # the most tokens one lookahead pass may score beyond the sequence (window + candidates)
NAMES = {
    "w": "lookahead_window",
    "n": "lookahead_ngram",
    "g": "lookahead_guesses",
    "prompt-pool": "lookahead_prompt_pool",
}
WIDGETS = tuple(
    Widget(name, "Lookahead: " + what.split(" (")[0], low, high, 1) for name, (low, high, what) in RANGES.items()
) + (
    Widget(
        "lookahead_prompt_pool", "Lookahead: the pool also holds the prompt's n-grams", help="lade's POOL_FROM_PROMPT"
    ),
)
ABOUT = (  # the UI's note above the widgets
    "lookahead decoding only: the window W (columns guessed ahead), the n-gram size N (N − 1 Jacobi "
    "levels; drafts of up to N − 1 tokens), and G, the n-grams verified per round. Each pass scores "
    "(W − 1) + (N − 2)·W window tokens and up to G·(N − 1) candidates"
)
NO_VLLM = (  # the vLLM export's whole snippet, as comments
    "vLLM has no lookahead decoding. Its reference implementation runs on transformers (the\n"
    "transformers snippet: hao-ai-lab/LookaheadDecoding, `lade`); TensorRT-LLM has it too\n"
    "(LookaheadDecodingConfig(max_window_size=W, max_ngram_size=N, max_verification_set_size=G))."
)

LADE = (  # the transformers export's note: lade's setup follows
    "Lookahead decoding's reference implementation (Fu et al. 2024): github.com/hao-ai-lab/LookaheadDecoding,\n"
    "`pip install lade`. It patches transformers' generate() and supports the transformers versions it pins:\n"
    "run it in an environment of its own. LEVEL is N, WINDOW_SIZE is W, GUESS_SET_SIZE is G."
)


def width(w: int, n: int, g: int) -> int:
    """Tokens a full lookahead pass scores beyond the sequence: the window, (W - 1) + (N - 2) W, and at most G
    candidates of N - 1 tokens."""
    return (w - 1) + (n - 2) * w + g * (n - 1)


@dataclass(frozen=True)
class Options:
    lookahead_window: int = DEFAULTS[0]  # W: columns of the Jacobi window
    lookahead_ngram: int = DEFAULTS[1]  # N: n-gram size (the window's levels + 1)
    lookahead_guesses: int = DEFAULTS[2]  # G: n-grams verified per round
    lookahead_prompt_pool: bool = False  # the pool also holds the prompt's and the output's n-grams

    def __post_init__(self) -> None:
        typed(self, lookahead_prompt_pool=flag(self.lookahead_prompt_pool, "lookahead prompt pool"))
        for name, (low, high, what) in RANGES.items():
            typed(self, **{name: whole(getattr(self, name), low, high, f"lookahead decoding: {what}")})
        w, n, g = self.lookahead_window, self.lookahead_ngram, self.lookahead_guesses
        if width(w, n, g) > MAX_WIDTH:
            raise PlaygroundError(
                f"lookahead decoding: W = {w}, N = {n} and G = {g} make a pass of up to {width(w, n, g)} tokens "
                f"beyond the sequence; at most {MAX_WIDTH}: a smaller W, N or G."
            )

    @property
    def label(self) -> str:
        pool = ", prompt pool" if self.lookahead_prompt_pool else ""
        return f"W = {self.lookahead_window}, N = {self.lookahead_ngram}, G = {self.lookahead_guesses}{pool}"


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """The target drafts for itself: no draft model, no confidence stop."""
    from playground.decoding.lookahead import LookaheadDrafter

    return LookaheadDrafter(
        pair.target, o.lookahead_window, o.lookahead_ngram, o.lookahead_guesses, o.lookahead_prompt_pool
    )


def lade(o: Options) -> tuple[str, ...]:
    """The transformers export's setup: lade patches generate() (its numbers: the validated options)."""
    pool = ", POOL_FROM_PROMPT=True" if o.lookahead_prompt_pool else ""
    return (
        "import os",
        'os.environ["USE_LADE"] = "1"',
        "import lade",
        "lade.augment_all()",
        f"lade.config_lade(LEVEL={o.lookahead_ngram}, WINDOW_SIZE={o.lookahead_window}, "
        f"GUESS_SET_SIZE={o.lookahead_guesses}, DEBUG=0{pool})",
    )


STRATEGY = Strategy(
    DrafterKind.LOOKAHEAD,
    build,
    ran="draft: the target's own Jacobi window, in the same pass ({target})",
    options=Options,
    widgets=WIDGETS,
    about=ABOUT,
    short="lookahead",
    names=NAMES,
    hf=Peer("lookahead", LADE, setup=lade),  # the reference implementation, lade, on transformers
    vllm=Peer(NONE, NO_VLLM),
)
