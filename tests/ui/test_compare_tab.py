"""The Compare pairs tab's callback on the tiny pairs: every pair x drafter against its own target alone."""
from __future__ import annotations

from playground import bench
from playground.ui.compare_tab import run_compare
from playground.ui.state import SessionState
from ui_support import PAIR, TWIN, controls

BASELINE = "target alone"


def compare(runner, pairs, drafters, **changes):
    return run_compare(runner, SessionState(), pairs, drafters, controls(**changes))


def test_pair_comparison(tiny_catalog, runner):
    # fp32 draft: the twin is then the target's exact copy (an int8 twin, LM head included, is not)
    status, fig, table, csv = compare(runner, [PAIR, TWIN], ["draft model", "prompt lookup"], k=3, max_new_tokens=16,
                                      draft_precision="fp32")
    assert "2 pair(s) × 2 drafter(s)" in status
    assert len(table) == 2 * (1 + 2)
    twin = table[(table["pair"] == TWIN) & (table["method"].str.startswith("draft model"))]
    assert len(twin) == 1
    assert twin["alpha"].iloc[0] == 1.0  # the twin is the target: every draft accepted
    assert all(table[table["method"] != BASELINE]["greedy_equal"])
    assert {d.name for d in fig.data} == set(table[table["method"] != BASELINE]["method"])
    assert csv["value"].endswith("comparison.csv")


def test_comparison_checks_its_request(tiny_catalog, runner, monkeypatch):
    assert "Pick at least one pair" in compare(runner, [], ["draft model"])[0]
    assert "Unknown drafter" in compare(runner, [PAIR], ["oracle"])[0]
    assert "k (draft length)" in compare(runner, [PAIR], ["draft model"], k=17)[0]
    assert "allowed model roots" not in compare(runner, [PAIR], ["prompt lookup"], draft_id="../../etc", max_new_tokens=4)[0]
    monkeypatch.setattr(bench, "MAX_CELLS", 5)  # the cap counts the runs of the whole request, over every pair
    status = compare(runner, [PAIR, TWIN], ["draft model", "prompt lookup"])[0]
    assert "That grid needs 6 runs" in status and "the limit is 5" in status  # 4 and 2 of the target alone


def test_draft_model_runs_each_pairs_own_drafter(tiny_catalog, cross_models, runner):
    """A cross-tokenizer pair in the comparison runs its draft through the cross-tokenizer drafter when
    "draft model" is picked (the same-tokenizer drafter would refuse it); a same-tokenizer pair keeps the
    plain one, and can still run the cross-tokenizer drafter when that is picked too."""
    import json

    cross = "tiny cross (test)"
    pairs = json.loads(tiny_catalog.read_text()) + [
        {"name": cross, "draft": cross_models["draft"], "target": cross_models["target"],
         "drafter": "cross-tokenizer draft model"}]
    tiny_catalog.write_text(json.dumps(pairs))
    status, fig, table, csv = compare(runner, [PAIR, cross], ["draft model", "cross-tokenizer draft model"],
                                      k=3, max_new_tokens=12, draft_precision="fp32")
    assert "Comparison done: 2 pair(s)" in status, status
    methods = {(p, m) for p, m in zip(table["pair"], table["method"])}
    assert methods == {(PAIR, BASELINE), (PAIR, "draft model (fp32)"), (PAIR, "cross-tokenizer draft model (fp32)"),
                       (cross, BASELINE), (cross, "cross-tokenizer draft model (fp32)")}
    assert all(table[table["method"] != BASELINE]["greedy_equal"])
