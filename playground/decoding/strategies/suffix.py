"""Suffix decoding: a suffix tree of the prompt, the output (and, asked, the session's earlier outputs) drafts a
chain or a tree, no model. Options by vLLM's names in brackets; its session state: the memory of earlier runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import Context, Peer, Strategy, Widget, flag, real, typed, whole
from playground.decoding.strategies import prompt_lookup

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

NAMES = {"factor": "suffix_factor", "min-prob": "suffix_min_prob", "depth": "suffix_depth", "memory": "suffix_memory"}
WIDGETS = (
    Widget("suffix_factor", "Suffix: spec factor", 0.5, 4, 0.5),
    Widget("suffix_min_prob", "Suffix: minimum token probability", 0, 0.9, 0.05),
    Widget("suffix_depth", "Suffix: tree depth", 2, 64, 1),
    Widget(
        "suffix_memory",
        "Suffix: also draft from this session's earlier runs",
        help="off: every run stands alone (the default)",
    ),
)
ABOUT = (  # the UI's note above the widgets
    "suffix decoding only (vLLM's names): a draft holds at most factor × the matched length tokens "
    "(max_spec_factor), stops where its frequency estimate falls under the minimum probability "
    "(min_token_prob), and the tree counts stretches up to its depth (max_tree_depth)"
)
NEAREST = (  # the transformers export: prompt lookup, the nearest it has
    "transformers has no suffix decoding (vLLM has: the vLLM snippet). Its nearest is prompt lookup:\n"
    "n-grams of the prompt and the output, the first match, no frequencies, a fixed draft length."
)


@dataclass(frozen=True)
class Options:
    """Its defaults are vLLM's (and the page's, the link's and the command line's)."""

    suffix_memory: bool = False  # also draft from this session's earlier outputs (off: runs stay independent)
    suffix_factor: float = 1.0  # a draft holds at most factor x (matched length) tokens [max_spec_factor]
    suffix_min_prob: float = 0.1  # stop a draft where its frequency estimate falls under this [min_token_prob]
    suffix_depth: int = 24  # the suffix tree's depth: match plus draft [max_tree_depth]

    def __post_init__(self) -> None:
        f, p = self.suffix_factor, self.suffix_min_prob
        typed(
            self,
            suffix_memory=flag(self.suffix_memory, "suffix memory"),
            suffix_factor=real(
                f,
                isinstance(f, (int, float)) and 0 < f <= 16,
                "suffix decoding: the spec factor (draft tokens per matched token) must be a number above 0 and "
                "at most 16",
            ),
            suffix_min_prob=real(
                p,
                isinstance(p, (int, float)) and 0 <= p < 1,
                "suffix decoding: the minimum token probability must be from 0 to below 1",
            ),
            suffix_depth=whole(self.suffix_depth, 2, 64, "suffix decoding: the tree depth"),
        )

    @property
    def label(self) -> str:
        """Where an option differs from vLLM's default: "factor 2, session memory"."""
        short = (("factor", "suffix_factor"), ("min p", "suffix_min_prob"), ("depth", "suffix_depth"))
        default = Options()
        parts = [f"{s} {getattr(self, f):g}" for s, f in short if getattr(self, f) != getattr(default, f)]
        return ", ".join(parts + ["session memory"] * self.suffix_memory)


def session_state():
    """The session's memory of earlier runs (suffix_memory draws on it)."""
    from playground.decoding.suffix import SuffixMemory

    return SuffixMemory()


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """The k policy's k caps a chain; a tree's shape caps a tree."""
    from playground.decoding.suffix import SuffixDrafter

    memory = run.kept if o.suffix_memory else None
    return SuffixDrafter(o.suffix_depth, o.suffix_factor, o.suffix_min_prob, run.tree, memory, pair.target)


def nearest_lookup(d: Options) -> dict:
    """transformers' prompt lookup, the nearest it has, at our prompt lookup's own default n-gram size."""
    return {"max_matching_ngram_size": prompt_lookup.Options().max_ngram}


def vllm_config(d: Options) -> dict:
    """What suffix decoding's options set in vLLM's speculative_config (Arctic Inference's names)."""
    return {
        "suffix_decoding_max_tree_depth": d.suffix_depth,
        "suffix_decoding_max_spec_factor": d.suffix_factor,
        "suffix_decoding_min_token_prob": d.suffix_min_prob,
        "suffix_decoding_max_cached_requests": 10000 if d.suffix_memory else 0,
    }


STRATEGY = Strategy(
    DrafterKind.SUFFIX,
    build,
    tree=True,
    own_tree=True,
    ran="draft: a suffix tree of the text (no model)",
    options=Options,
    widgets=WIDGETS,
    about=ABOUT,
    short="suffix",
    names=NAMES,
    hf=Peer("nearest prompt lookup", NEAREST, k=prompt_lookup.K_ARGUMENT, config=nearest_lookup),
    vllm=Peer(
        "suffix", config=vllm_config, requires=("arctic_inference",)
    ),  # vLLM >= 0.11: Snowflake's Arctic Inference
    session=session_state,
)
