"""ROUGE-L on hand-computed cases."""

from __future__ import annotations

import pytest

from acute.tasks.rouge import best_rouge_l_f1, lcs_length, rouge_l, rouge_l_f1, rouge_tokenize


def test_tokenize_like_rouge_score_default():
    assert rouge_tokenize("Don't STOP, 3-D models!") == ["don", "t", "stop", "3", "d", "models"]
    assert rouge_tokenize("  ...  ") == []


@pytest.mark.parametrize("a, b, expected", [
    ("a b c d e".split(), "a c e".split(), 3),
    ("a b c".split(), "c b a".split(), 1),
    ("x y".split(), "a b".split(), 0),
    ([], ["a"], 0),
    ("a b a b".split(), "b a b a".split(), 3),
    ("the cat sat on the mat".split(), "the cat on the mat".split(), 5),
])
def test_lcs_hand_cases(a, b, expected):
    assert lcs_length(a, b) == expected
    assert lcs_length(b, a) == expected


def test_rouge_l_hand_case():
    # prediction 5 tokens, reference 6 tokens, LCS = "the cat on the mat" = 5
    s = rouge_l("the cat on the mat", "The cat sat on the mat.")
    assert s.precision == pytest.approx(5 / 5)
    assert s.recall == pytest.approx(5 / 6)
    assert s.fmeasure == pytest.approx(2 * 1 * (5 / 6) / (1 + 5 / 6))  # = 10/11


def test_rouge_l_second_hand_case():
    # pred: police killed the gunman (4); ref: police kill the gunman (4); LCS = police the gunman = 3
    s = rouge_l("police killed the gunman", "police kill the gunman")
    assert s.precision == pytest.approx(0.75)
    assert s.recall == pytest.approx(0.75)
    assert s.fmeasure == pytest.approx(0.75)


def test_rouge_l_edge_cases():
    assert rouge_l_f1("", "anything") == 0.0
    assert rouge_l_f1("abc", "xyz") == 0.0
    assert rouge_l_f1("Same words here", "same, words; here!") == pytest.approx(1.0)
    assert best_rouge_l_f1("a b", []) == 0.0
    # best over references: 1.0 for the exact one
    assert best_rouge_l_f1("a b", ["c d", "a b", "a"]) == pytest.approx(1.0)
    # "a" vs "a b": P = 1, R = 1/2, F = 2/3
    assert best_rouge_l_f1("a", ["a b", "z"]) == pytest.approx(2 / 3)
