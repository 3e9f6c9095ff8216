"""Every strategy option can be set from the command line, the link and the page: the command line's names come from
each Options dataclass (a field by its own name, with dashes, beside the strategy's short names and its positional
option), the link's and the page's from the strategies' widgets, each built once."""

from __future__ import annotations

from dataclasses import fields

import pytest

from playground import decoding
from playground.core.config import Precision
from playground.run.spec import DrafterSpec, parse_drafter_name
from playground.ui import build_demo, links
from playground.ui.common import NAMES, read_spec
from ui_support import controls


def samples() -> list[tuple[str, str, object]]:
    """(drafter, option, a value other than its default) for every option of every strategy a user can pick: the far
    end of its widget, a flag flipped, the precision int8. An option with neither a widget nor the page's precision
    control fails here: the page could not set it."""
    out = []
    for kind in decoding.DRAFTERS:
        s = decoding.strategy(kind)
        widgets, defaults = {w.name: w for w in s.widgets}, s.options()
        for f in fields(s.options):
            default = getattr(defaults, f.name)
            if f.name == "precision":
                value = Precision.INT8
            elif isinstance(default, bool):
                value = not default
            else:
                value = type(default if default is not None else 0)(widgets[f.name].high)
            out.append((kind.value, f.name, value))
    return out


SAMPLES = samples()


def text(value: object) -> str:
    """A value as the command line and the link write it."""
    return str(int(value)) if isinstance(value, bool) else getattr(value, "value", str(value))


def test_every_option_has_a_sample():
    assert {(d, o) for d, o, _ in SAMPLES} >= {
        ("prompt lookup", "max_ngram"),
        ("draft model", "draft_vocab"),
        ("staged: prompt lookup → draft model", "max_ngram"),
        ("early exit", "exit_layer"),
    }


@pytest.mark.parametrize("drafter, option, value", SAMPLES, ids=[f"{d}:{o}" for d, o, _ in SAMPLES])
def test_the_command_line_sets_every_option_by_its_own_name(drafter, option, value):
    spec = parse_drafter_name(f"{drafter}:{option.replace('_', '-')}={text(value)}")
    assert spec == DrafterSpec.of(drafter, **{option: value})


@pytest.mark.parametrize("drafter, option, value", SAMPLES, ids=[f"{d}:{o}" for d, o, _ in SAMPLES])
def test_the_link_and_the_page_set_every_option(tiny_catalog, drafter, option, value):
    name = "draft_precision" if option == "precision" else option
    assert name in NAMES  # a control of the page (and an input of the API)
    values, _, notes = links.read_settings({"drafter": drafter, name: text(value)})
    assert notes == []
    spec = read_spec(controls(**values))  # as Generate reads the controls
    assert spec.drafter == DrafterSpec.of(drafter, **{option: value})


def test_the_page_builds_each_options_control_once(tiny_catalog, runner):
    ids = [b.elem_id for b in build_demo(runner).blocks.values() if getattr(b, "elem_id", None)]
    names = {w.name for kind in decoding.DRAFTERS for w in decoding.strategy(kind).widgets}
    assert {n: ids.count(n.replace("_", "-")) for n in names} == {n: 1 for n in names}


def test_prompt_lookups_ngram_size_on_the_command_line():
    """Issue 45: "prompt lookup:max-ngram=4" answered "'prompt lookup' takes no option"."""
    assert parse_drafter_name("prompt lookup:max-ngram=4") == DrafterSpec.of("prompt lookup", max_ngram=4)
    assert parse_drafter_name("staged:int8,max-ngram=2") == DrafterSpec.of(
        "staged: prompt lookup → draft model", precision="int8", max_ngram=2
    )
