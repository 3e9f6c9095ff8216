"""Leviathan et al.'s formulas against values computed by hand."""
import pytest

from playground import theory


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
