"""Settings as a link: the Export tab's link carries the controls and reading it back gives the same values; an
unknown or bad value is left out with a note (never an error); a gallery run opens from ?run=."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl

import gradio as gr

from playground.ui import layout, links
from playground.ui.common import NAMES
from playground.ui.state import SessionState
from ui_support import PROMPT, TWIN, controls


def read(query: str):
    return links.read_settings(dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)))


def test_the_link_carries_the_controls_and_reads_back(tiny_catalog):
    c = controls(
        pair=TWIN,
        drafter="early exit",
        exit_layer=2,
        target_precision="bf16",
        invariant=False,
        draft_precision="int8",
        k=6,
        tree="3-2-1",
        policy="adaptive (theory)",
        confidence=0.55,
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=77,
        seed=12345,
        suffix_depth=12,
        suffix_memory=True,
        lookahead_window=7,
    )
    query, note = links.settings_link(c, compare=True)
    values, flags, notes = read(query)
    assert notes == [] and note == "" and flags == {"compare": True}
    default = controls()
    given, defaults = c.values(), default.values()
    expected = {
        name: value
        for name, value in given.items()
        if name not in ("draft_id", "target_id") and (name not in c.options or value != defaults[name])
    }
    assert values == expected


def test_an_example_prompt_goes_by_its_number(tiny_catalog):
    example = links.load_examples()[2]["prompt"]
    query, _ = links.settings_link(controls(prompt=example))
    assert "example=3" in query and "prompt=" not in query
    assert read(query)[0]["prompt"] == example
    assert read(links.settings_link(controls(prompt=PROMPT))[0])[0]["prompt"] == PROMPT  # any other prompt as text
    assert read(query)[1] == {"compare": False}  # the box starts ticked: an unticked one is said
    long = "x" * (links.MAX_LINK_PROMPT + 1)
    query, note = links.settings_link(controls(prompt=long))
    assert "prompt" not in query and "leaves it out" in note


def test_bad_values_are_left_out_with_a_note(tiny_catalog):
    values, flags, notes = read(
        "?k=99&temperature=hot&pair=nope&drafter=oracle&policy=sideways&tree=3-x&seed=-1"
        "&example=42&compare=maybe&colour=red&top_p=0.5&target_precision=int8"
    )
    assert values == {"top_p": 0.5}  # the one good value
    text = " ".join(notes)
    for name in (
        "k=",
        "temperature=",
        "pair=",
        "drafter=",
        "policy=",
        "tree=",
        "seed=",
        "example=",
        "compare=",
        "'colour' is not a setting",
        "target_precision=",
    ):
        assert name in text, name
    assert links.settings_note(notes).startswith("The link's settings were applied, except:")
    values, _, notes = read("?k=٣&max_new_tokens=1_6&temperature=0.5")  # an Arabic-Indic 3; an underscore
    assert values == {"temperature": 0.5} and "k=" in " ".join(notes) and "max_new_tokens=" in " ".join(notes)


def test_hostile_values_never_reach_the_page_as_markup(tiny_catalog):
    values, _, notes = read("?pair=%3Cscript%3Ealert(1)%3C/script%3E&prompt=%3Cb%3Ehi%3C/b%3E")
    assert values == {"prompt": "<b>hi</b>"}  # the prompt box shows text; the token view escapes it
    view = first(tiny_catalog, "?pair=%3Cscript%3Ealert(1)%3C/script%3E")
    assert "<script>" not in view[0] and "&lt;script&gt;" in view[0]


def first(catalog, query: str, session=None) -> list:
    request = SimpleNamespace(query_params=dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)))
    return layout.first_view(session or SessionState(), request, 11)


def test_the_page_load_sets_what_the_link_says(tiny_catalog):
    out = first(tiny_catalog, "?k=7&projector=1&compare=1")
    fields = dict(zip(NAMES, out[11 : 11 + len(NAMES)]))
    assert fields["k"] == 7 and fields["pair"] == gr.skip()
    assert out[-2:] == [True, True]  # compare, projector
    assert out[0] == gr.skip()  # nothing to say


def test_a_link_to_a_gallery_run_opens_it(tiny_catalog):
    session = SessionState()
    out = first(tiny_catalog, "?run=story&k=5", session)
    assert "Recorded run (gallery: story" in out[0] and "tok-accepted" in out[1]
    fields = dict(zip(NAMES, out[11:]))
    assert fields["k"] == 5  # the link's own settings win over the run's
    assert session.run is not None and session.run.finished
    assert "is not one of the gallery" in first(tiny_catalog, "?run=../../etc/passwd")[0]
