"""The run description: validated once, with messages that name the field; user input read only here."""

from __future__ import annotations

import pytest

from playground.core.errors import PlaygroundError
from playground.core.config import DecodeConfig, DrafterKind, KPolicy, Precision
from playground.run.spec import (
    DrafterSpec,
    PairSpec,
    RunSpec,
    check_prompt,
    parse_drafter,
    parse_drafter_name,
    parse_k,
    parse_policy,
)
from playground.core.inputs import parse_list

PAIR = PairSpec("p", "target/folder", "draft/folder")


def test_a_run_description_is_frozen_and_typed():
    spec = RunSpec(PAIR, DrafterSpec.of("draft model", precision="int8"), DecodeConfig(k=3.0, policy="theory"), "hi")
    assert spec.drafter.kind is DrafterKind.DRAFT_MODEL and spec.drafter.precision is Precision.INT8
    assert spec.decode.k == 3 and isinstance(spec.decode.k, int) and spec.decode.policy is KPolicy.THEORY
    with pytest.raises(Exception):
        spec.decode.k = 5  # frozen


def test_baseline_keeps_prompt_precision_and_sampling_and_drops_the_draft():
    spec = RunSpec(
        PairSpec("p", "t", "d", target_precision="bf16"),
        DrafterSpec(),
        DecodeConfig(k=6, policy=KPolicy.HEURISTIC, temperature=0.7, seed=3),
        "hello",
    )
    base = spec.baseline()
    assert base.drafter.kind is DrafterKind.TARGET_ALONE and base.decode.policy is KPolicy.FIXED
    assert (base.prompt, base.pair.target_precision, base.decode.temperature, base.decode.seed) == (
        "hello",
        Precision.BF16,
        0.7,
        3,
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        ("fixed k", KPolicy.FIXED),
        ("adaptive (heuristic)", KPolicy.HEURISTIC),
        ("adaptive (theory)", KPolicy.THEORY),
        ("theory", KPolicy.THEORY),
        (True, KPolicy.HEURISTIC),
        (False, KPolicy.FIXED),
        ("adaptive", KPolicy.HEURISTIC),
    ],
)
def test_k_policy_is_read_from_labels_values_and_bools(value, expected):
    assert parse_policy(value) is expected


def test_unknown_policy_drafter_and_precision_name_the_field():
    with pytest.raises(PlaygroundError, match="Unknown k policy 'magic'"):
        parse_policy("magic")
    with pytest.raises(PlaygroundError, match="Unknown drafter 'oracle'"):
        parse_drafter("oracle")
    with pytest.raises(PlaygroundError, match="Unknown draft precision 'int2'"):
        DrafterSpec.of(precision="int2")
    with pytest.raises(PlaygroundError, match="target precision must be one of"):
        PairSpec("p", "t", target_precision="int8")
    with pytest.raises(PlaygroundError, match="early-exit layer"):
        parse_drafter("early exit", options={"exit_layer": 2.5})


def test_command_line_names_become_typed_drafters():
    assert parse_drafter_name("draft model:int8") == DrafterSpec.of(DrafterKind.DRAFT_MODEL, precision="int8")
    assert parse_drafter_name("draft model:int4").label == "draft model (int4)"
    assert parse_drafter_name("draft model") == DrafterSpec(DrafterKind.DRAFT_MODEL)
    assert parse_drafter_name("early exit:7") == DrafterSpec.of(DrafterKind.EARLY_EXIT, exit_layer=7)
    assert parse_drafter_name("prompt lookup").kind is DrafterKind.PROMPT_LOOKUP
    assert parse_k("4") == (4, KPolicy.FIXED) and parse_k("theory")[1] is KPolicy.THEORY
    for bad in ("early exit:x", "prompt lookup:3", "oracle", "suffix:factor=٢", "suffix:depth=3_2", "early exit:٧"):
        with pytest.raises(PlaygroundError):
            parse_drafter_name(bad)
    with pytest.raises(PlaygroundError, match="--k takes"):
        parse_k("17")


def test_a_drafter_option_only_applies_to_its_own_drafter():
    layer = {"exit_layer": 3}
    assert parse_drafter("prompt lookup", "int8", layer) == DrafterSpec(DrafterKind.PROMPT_LOOKUP)
    assert parse_drafter("early exit", "int8", layer) == DrafterSpec.of(DrafterKind.EARLY_EXIT, exit_layer=3)
    for unset in (0, 0.0, "", None):  # the page's 0 (the widget's unset value): a quarter of the target's layers
        assert parse_drafter("early exit", precision="int8", options={"exit_layer": unset}).options.exit_layer is None
    with pytest.raises(PlaygroundError, match="early-exit layer must be a whole number >= 1"):
        parse_drafter("early exit", options={"exit_layer": False})  # a flag is not the unset layer
    assert parse_drafter("draft model", precision="default").precision is None


def test_the_draft_model_drafter_needs_a_draft():
    with pytest.raises(PlaygroundError, match="needs a pair with a draft model"):
        RunSpec(PairSpec("p", "t"), DrafterSpec(), DecodeConfig(), "hi")


@pytest.mark.parametrize(
    "prompt, words",
    [
        ("", "empty"),
        ("  \n", "empty"),
        (None, "empty"),
        ("x" * 100_000, "too long"),
        ("abc\ud800def", "not valid text"),
    ],
)
def test_bad_prompts_are_refused_with_a_clear_message(prompt, words):
    with pytest.raises(PlaygroundError, match=words):
        check_prompt(prompt)
    with pytest.raises(PlaygroundError, match=words):
        RunSpec(PAIR, DrafterSpec(), DecodeConfig(), prompt)


def test_list_boxes_parse_in_order_without_duplicates():
    assert parse_list("1 2, 4 2 8", "k values", int, lambda v: 1 <= v <= 16, "1..16") == [1, 2, 4, 8]
    with pytest.raises(PlaygroundError, match="k values: 'x' is not a number"):
        parse_list("1 x", "k values", int, lambda v: True, "1..16")
    with pytest.raises(PlaygroundError, match="temperatures: give at least one value"):
        parse_list("  ", "temperatures", float, lambda v: True, "0..2")


@pytest.mark.parametrize("text", ["٣", "1 ٢", "４", "1_0", "inf", "nan", "0x10", "²"])
def test_list_boxes_take_numbers_in_ascii_digits_only(text):
    """int() and float() read other scripts' digits ("٣" is 3), "1_0" and "inf": the page documents ASCII numbers."""
    with pytest.raises(PlaygroundError, match="k values: .* is not a number"):
        parse_list(text, "k values", float, lambda v: True, "1..16")
    assert parse_list("1 -2 .5 3e-1 +4", "x", float, lambda v: True, "any") == [1, -2, 0.5, 0.3, 4]
    with pytest.raises(PlaygroundError, match="k values must be text"):
        parse_list([1, 2], "k values", int, lambda v: True, "1..16")


def test_oversized_list_input_is_refused_before_any_value_is_parsed():
    huge = " ".join(f"{i / 100000:.5f}" for i in range(80_000))  # ~640 KB of distinct temperatures
    parsed = []
    with pytest.raises(PlaygroundError, match="too long"):
        parse_list(huge, "temperatures", lambda t: parsed.append(t) or float(t), lambda v: True, "0..2")
    assert parsed == []  # refused from its length alone
    many = " ".join(str(i) for i in range(200))  # short enough to parse, too many values
    with pytest.raises(PlaygroundError, match="more than 64 distinct values"):
        parse_list(many, "k values", lambda t: parsed.append(t) or int(t), lambda v: True, "any", limit=64)
    assert len(parsed) == 65  # stopped at the first value over the limit


def test_confidence_threshold_is_validated_and_defaults_to_transformers_value():
    from playground.core.config import parse_confidence

    assert DecodeConfig().confidence == 0.4 and parse_policy("adaptive (draft confidence)") is KPolicy.CONFIDENCE
    assert DecodeConfig(policy="confidence", confidence="0.6").confidence == 0.6 and parse_confidence(0) == 0.0
    assert parse_k("confidence")[1] is KPolicy.CONFIDENCE
    for bad in (1, 1.5, -0.1, "x", None, float("nan"), True):
        with pytest.raises(PlaygroundError, match="draft confidence threshold"):
            DecodeConfig(confidence=bad)


def test_tree_shapes_are_parsed_and_validated_with_clear_messages():
    from playground.core.treeshape import TreeShape, parse_tree

    assert parse_tree("3-2-1-1") == TreeShape((3, 2, 1, 1)) and parse_tree(" 2 - 2 ").branching == (2, 2)
    assert TreeShape((3, 2, 1, 1)).nodes == 3 + 6 + 6 + 6 and TreeShape((3, 2, 1, 1)).depth == 4
    assert parse_tree("dynamic:16") == TreeShape(budget=16) and parse_tree("Dynamic:16").dynamic
    assert parse_tree("") is None and parse_tree("chain") is None and parse_tree(None) is None
    spec = RunSpec(PAIR, DrafterSpec(), DecodeConfig(tree="2-2"), "hi")
    assert spec.decode.tree.label == "2-2" and spec.decode.k_label == "tree 2-2" and spec.baseline().decode.tree is None
    for bad, words in (
        ("3-x", "children per depth"),
        ("dynamic:x", "dynamic:N"),
        ("dynamic:1", "node budget"),
        ("9-1", "1 to 8 children"),
        ("0-2", "1 to 8 children"),
        ("8-8", "at most 64"),
        ("1-" * 16 + "1", "at most 16 depths"),
        ("dynamic:65", "node budget"),
    ):
        with pytest.raises(PlaygroundError, match=words):
            DecodeConfig(tree=bad)
    with pytest.raises(PlaygroundError, match="drafts a chain only"):
        RunSpec(PAIR, DrafterSpec("prompt lookup"), DecodeConfig(tree="2-2"), "hi")


@pytest.mark.parametrize("bad", ["²-1", "dynamic:①", "٣-٢", "3-²", "9" * 5000, "1-" * 3000 + "1", ["3", "2"]])
def test_a_tree_takes_ascii_digits_only_and_says_so(bad):
    """Issue 29.5: '²-1', 'dynamic:①' or a 5,000-digit tree answered "ValueError: invalid literal for int()" or
    "Exceeds the limit (4300 digits)" (str.isdigit takes any Unicode digit; int() refuses some, reads others)."""
    with pytest.raises(
        PlaygroundError,
        match=r"tree: (write children per depth in the digits 0-9|too long|give the "
        r"tree as text)",
    ) as refused:
        DecodeConfig(tree=bad)
    assert len(str(refused.value)) < 300  # a long value is not echoed back
    with pytest.raises(PlaygroundError, match="--k takes whole numbers"):
        parse_k("²")


def test_a_policy_takes_its_starting_k_or_cap_after_a_colon():
    from playground.run.spec import parse_k

    default = DecodeConfig().k
    assert parse_k("confidence:8") == (8, KPolicy.CONFIDENCE) and parse_k("theory") == (default, KPolicy.THEORY)
    assert DecodeConfig(k=default + 2, policy=KPolicy.CONFIDENCE).k_label == f"confidence:{default + 2}"
    assert DecodeConfig(k=default, policy=KPolicy.CONFIDENCE).k_label == "confidence"
    for bad in ("confidence:99", "confidence:", "nope:3"):
        with pytest.raises(PlaygroundError, match="--k takes"):
            parse_k(bad)
