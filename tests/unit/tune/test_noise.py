import pytest

from pipeline.tune.noise import Summary, Verdict, compare, t_quantile


@pytest.mark.parametrize("dof, exact", [(2, 2.920), (4, 2.132), (10, 1.812), (1e9, 1.645)])
def test_t_quantile_is_close_to_the_table(dof, exact):
    assert t_quantile(0.95, dof) == pytest.approx(exact, rel=0.015)


def test_a_difference_smaller_than_the_noise_is_a_tie():
    noisy = Summary.of([0.9, 1.1, 1.0])
    slightly_better = Summary.of([0.89, 1.09, 0.99])
    assert compare(slightly_better, noisy, 0.95, 0.0) is Verdict.TIE
    assert compare(noisy, slightly_better, 0.95, 0.0) is Verdict.TIE


def test_a_difference_beyond_the_noise_is_a_verdict():
    a, b = Summary.of([1.00, 1.01, 0.99]), Summary.of([0.80, 0.81, 0.79])
    assert compare(b, a, 0.95, 0.0) is Verdict.BETTER
    assert compare(a, b, 0.95, 0.0) is Verdict.WORSE


def test_min_gain_widens_the_band():
    a, b = Summary.of([1.0, 1.0]), Summary.of([0.97, 0.97])
    assert compare(b, a, 0.95, 0.0) is Verdict.BETTER
    assert compare(b, a, 0.95, 0.05) is Verdict.TIE


def test_one_sample_says_nothing_about_the_noise():
    one, many = Summary.of([0.5]), Summary.of([1.0, 1.01, 0.99])
    assert compare(one, many, 0.95, 0.0) is Verdict.TIE
