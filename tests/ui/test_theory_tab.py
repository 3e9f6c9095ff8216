"""The Theory tab's callbacks: the explorer alone, then with the last run (its point, this machine's
calibrated curve from the runner's cost profile, and the V(n) chart)."""

from __future__ import annotations

from playground.core import theory
from playground.ui import run_tab
from playground.ui.state import SessionState
from playground.ui.theory_tab import theory_from_run, theory_view
from playground.views.theory import CALIBRATED, IDEAL
from ui_support import controls


def test_theory_view_without_a_run():
    fig, line, profile = theory_view(0.8, 0.1, SessionState())
    assert f"**{theory.best_k(0.8, 0.1)}** with Leviathan's ideal (v = 1)" in line and "this machine" not in line
    names = [d.name for d in fig.data]
    assert IDEAL in names and CALIBRATED not in names
    assert not profile.data  # no profile yet: an empty chart with a note
    status = theory_view(1.5, 0.1, SessionState())[1]
    assert "status-error" in status and "α (acceptance rate) must be a number from 0 to 0.99, got 1.5" in status


def test_theory_view_overlays_the_last_run(tiny_catalog, runner):
    state = SessionState()
    list(run_tab.generate(runner, state, controls(max_new_tokens=24), False))
    fig, line, profile = theory_view(0.7, 0.2, state)
    assert "Best k" in line and "last run" in line and "Calibrated to this machine" in line
    names = [d.name for d in fig.data]
    assert IDEAL in names and CALIBRATED in names and "this run" in names  # both curves and the run's point
    ns = sorted(state.run.profile.verify_s)
    assert list(profile.data[0].x) == ns and profile.data[0].y[0] == 1.0  # V(n) / V(1) of the measured target
    alpha, c = theory_from_run(state)
    assert 0 <= alpha <= 0.99 and 0 <= c <= 1
