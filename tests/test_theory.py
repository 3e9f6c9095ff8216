"""Leviathan et al.'s formulas against values computed by hand."""

import pytest

from playground.core import theory


def test_expected_tokens_hand_values():
    # (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2
    assert theory.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert theory.expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert theory.expected_tokens(0.0, 7) == pytest.approx(1.0)  # every draft rejected: the correction only
    assert theory.expected_tokens(1.0, 5) == 6.0  # all accepted plus the bonus


def test_speedup_hand_values():
    # 3.3616 / (4 * 0.1 + 1)
    assert theory.speedup(0.8, 4, 0.1) == pytest.approx(2.40114, abs=1e-5)
    assert theory.speedup(0.5, 1, 0.0) == pytest.approx(1.5)
    assert theory.speedup(0.0, 3, 0.5) == pytest.approx(1 / 2.5)  # drafting only costs


def test_best_k_maximises_speedup():
    assert theory.best_k(1.0, 0.0) == 16  # free perfect drafts: as long as allowed
    assert theory.best_k(0.0, 0.1) == 1
    alpha, c = 0.8, 0.1
    k = theory.best_k(alpha, c)
    assert all(theory.speedup(alpha, k, c) >= theory.speedup(alpha, j, c) for j in range(1, 17))
    assert k == 6  # (1 - 0.8^7) / 0.2 / 1.6 = 2.46964, above k=5 (2.45952) and k=7 (2.44772)
    assert theory.speedup(alpha, 6, c) == pytest.approx(2.46964, abs=1e-5)


FLAT = theory.CostProfile({1: 0.3, 2: 0.3, 17: 0.3})
STEEP = theory.CostProfile({1: 0.3, 2: 0.6, 3: 0.9, 17: 5.1})


def test_cost_profile_interpolates_between_measured_points():
    p = theory.CostProfile({1: 0.4, 5: 0.8}, draft_s=0.1)
    assert p.V(3) == pytest.approx(0.6) and p.V(9) == 0.8 and p.step_s == 0.4
    assert p.v(2) == pytest.approx(0.6 / 0.4) and p.c == pytest.approx(0.25)
    with pytest.raises(ValueError):
        theory.CostProfile({})


def test_calibrated_speedup_hand_values():
    # E(0.8, 4) = 3.3616; v(4) = V(5)/V(1) = (0.3 + 0.3 * 3) / 0.3 = 4 on STEEP (linear from 3 to 17)
    assert STEEP.v(4) == pytest.approx((0.9 + (5.1 - 0.9) * 2 / 14) / 0.3)
    assert theory.calibrated_speedup(0.8, 4, 0.1, FLAT) == pytest.approx(3.3616 / 1.4)
    assert theory.calibrated_speedup(0.8, 4, 0.1, STEEP) == pytest.approx(3.3616 / (0.4 + STEEP.v(4)))
    assert theory.calibrated_speedup(0.8, 4, 0.1, FLAT, tokens_per_round=4.0) == pytest.approx(4.0 / 1.4)
    assert theory.calibrated_speedup(0.8, 0, 0.1, FLAT) == 1.0  # no draft: the target alone


def test_best_k_with_a_flat_profile_is_leviathans_and_with_a_steep_one_smaller():
    for alpha, c in ((0.8, 0.1), (0.9, 0.05), (0.6, 0.2)):
        assert theory.best_k_calibrated(alpha, c, FLAT) == theory.best_k(alpha, c)
        assert theory.best_k_calibrated(alpha, c, STEEP) < theory.best_k(alpha, c)


def test_best_k_may_be_zero_only_when_asked():
    useless = theory.CostProfile({1: 0.3, 2: 0.6})
    assert theory.best_k_calibrated(0.1, 0.5, useless, k_min=0) == 0
    assert theory.best_k_calibrated(0.1, 0.5, useless) == 1


def test_acceptance_estimate_weighs_recent_rounds_and_decays_to_the_prior():
    est = theory.AcceptanceEstimate()
    assert est.alpha == 0.5
    for _ in range(10):
        est.update(4, 4)
    high = est.alpha
    assert high > 0.9
    for _ in range(10):
        est.update(4, 0)
    assert est.alpha < 0.5  # as many rounds rejected at once outweigh the older fully accepted ones
    for _ in range(40):
        est.update(0, 0)  # plain steps: no evidence, back towards 1/2
    assert est.alpha == pytest.approx(0.5, abs=0.01)


def test_run_speedup_counts_the_first_pass_both_runs_pay():
    profile = theory.CostProfile({1: 0.1, 5: 0.12})
    a, k, c = 0.8, 4, 0.2
    e = (1 - a**5) / (1 - a)  # 3.3616
    first = 2.0  # the prompt pass of a long prompt, plus the draft's prefill and k draft steps
    spec_s = first + (64 - e) / e * (k * c + 1.2) * 0.1
    base_s = first - k * c * 0.1 - (0.12 - 0.1) + 63 * 0.1
    assert theory.run_speedup(a, k, c, profile, 64, first) == pytest.approx(base_s / spec_s)
    # a long prompt pulls a short run towards 1; a long run tends to the steady-state calibrated speedup
    steady = theory.calibrated_speedup(a, k, c, profile)
    assert 1 < theory.run_speedup(a, k, c, profile, 64, first) < steady
    assert theory.run_speedup(a, k, c, profile, 100_000, first) == pytest.approx(steady, rel=1e-2)
    assert theory.run_speedup(a, 0, c, profile, 64, first) == 1.0


def test_tree_expected_tokens_reduce_to_the_chain_and_grow_with_branching():
    from playground.core.theory import expected_tokens, expected_tokens_tree

    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in (1, 4, 7):
            assert abs(expected_tokens_tree(alpha, [1] * k) - expected_tokens(alpha, k)) < 1e-12
    assert expected_tokens_tree(0.5, [2]) == pytest.approx(1 + 0.75)  # one of two candidates accepted: 1 - 0.5^2
    assert expected_tokens_tree([0.5, 0.4], [2, 1]) == pytest.approx(1 + 0.75 + 0.75 * 0.4)
    assert expected_tokens_tree(0.6, [3, 2, 1, 1]) > expected_tokens_tree(0.6, [1, 1, 1, 1])
    with pytest.raises(ValueError):
        expected_tokens_tree([0.5], [1, 1])
