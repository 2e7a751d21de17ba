"""The lexical half of the crisis message classifier: same numbers as scikit-learn's tf-idf, a safe file
format, and a combined score that follows both models."""

from __future__ import annotations

import numpy as np
import pytest

from mascot.errors import ConfigError
from mascot.safety.lexical import FILE, N_FEATURES, LexicalModel, _counts, combine, out_of_fold

TEXTS = ["i want to kms tonight", "I bought a rope today", "nobody would miss me if i was gone",
         "this commute is killing me", "I'd kill for a coffee", "my phone is dying", "im so done with life",
         "I finished my essay on suicide prevention", "gonna end it all", "dead tired after the gym"]
LABELS = [True, True, True, False, False, False, True, False, True, False]


def test_features_match_scikit_learn_tfidf():
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfTransformer

    model = LexicalModel.fit(TEXTS, LABELS)
    ref = sparse.hstack([TfidfTransformer(sublinear_tf=True).fit(x).transform(x) for x in _counts(TEXTS)]).tocsr()
    from mascot.safety.lexical import _tfidf

    ours = _tfidf(_counts(TEXTS), model.idf.astype(np.float64))
    assert abs(ours - ref).max() < 1e-5
    assert model.idf.shape == model.coef.shape == (2 * N_FEATURES,)


def test_learns_and_round_trips_without_pickle(tmp_path):
    model = LexicalModel.fit(TEXTS, LABELS)
    p = model.predict(TEXTS)
    assert p[np.array(LABELS)].min() > p[~np.array(LABELS)].max()  # separates its own training lines
    model.save(tmp_path)
    again = LexicalModel.load(tmp_path)
    assert again is not None and np.allclose(again.predict(TEXTS), p, atol=1e-6)
    assert LexicalModel.load(tmp_path / "none") is None  # no file: the encoder scores alone
    (tmp_path / FILE).write_bytes(b"not an npz")
    with pytest.raises(ConfigError, match="not a readable lexical crisis model"):
        LexicalModel.load(tmp_path)
    assert model.predict([]).shape == (0,)


def test_needs_both_classes_and_combines_in_logit_space():
    with pytest.raises(ConfigError, match="both crisis and negative"):
        LexicalModel.fit(TEXTS[:3], LABELS[:3])
    enc, lex = np.array([0.9, 0.1, 0.5]), np.array([0.5, 0.5, 0.9])
    assert np.allclose(combine(enc, lex, 0.0), enc, atol=1e-6) and np.allclose(combine(enc, lex, 1.0), lex, atol=1e-6)
    mid = combine(enc, lex, 0.5)
    assert mid[0] == pytest.approx(0.75, abs=1e-3) and mid[2] > 0.5  # sigmoid of the mean logit


def test_out_of_fold_gives_a_score_per_line_and_the_first_fold_model():
    oof, first = out_of_fold(TEXTS * 3, LABELS * 3, folds=3, seed=0)
    assert oof.shape == (30,) and 0 <= oof.min() and oof.max() <= 1 and isinstance(first, LexicalModel)
