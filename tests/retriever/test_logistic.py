"""The scikit-learn-free logistic regression: the objective scikit-learn minimises, solved to
its tolerance; a sparse fit over the used columns only."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from tapt.retriever.scoring.logistic import fit_logistic


def _rows(seed: int = 0, n: int = 600, d: int = 20):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.8, size=n) > 0.7).astype(np.float32)
    return x, y


def test_a_dense_fit_is_scikit_learns_lbfgs_fit():
    x, y = _rows()
    ours = fit_logistic(x, y, C=0.5, tol=1e-8)
    theirs = LogisticRegression(C=0.5, class_weight="balanced", tol=1e-8, max_iter=2000).fit(x, y)
    np.testing.assert_allclose(ours.coef, theirs.coef_[0], atol=1e-3)
    assert ours.intercept == pytest.approx(theirs.intercept_[0], abs=1e-3)
    np.testing.assert_allclose(ours.decision(x), theirs.decision_function(x), atol=1e-3)


def test_a_sparse_fit_is_liblinears_objective_and_leaves_unused_columns_at_zero():
    x, y = _rows(1, d=30)
    wide = sp.hstack([sp.csr_matrix(x), sp.csr_matrix((len(x), 1000), dtype=np.float32)]).tocsr()
    wide = wide[:, np.random.default_rng(2).permutation(wide.shape[1])]
    ours = fit_logistic(wide, y, C=1.0, penalize_intercept=True, tol=1e-8)
    theirs = LogisticRegression(C=1.0, class_weight="balanced", solver="liblinear", tol=1e-10,
                                max_iter=5000).fit(wide, y)
    used = np.flatnonzero(np.asarray(abs(wide).sum(axis=0)).ravel())
    assert len(used) == 30 and ours.coef.shape == (wide.shape[1],)
    assert not ours.coef[np.setdiff1d(np.arange(wide.shape[1]), used)].any()
    np.testing.assert_allclose(ours.decision(wide), theirs.decision_function(wide), atol=2e-3)


@pytest.mark.parametrize("y, C", [(np.ones(10), 1.0), (np.zeros(10), 1.0),
                                  (np.r_[np.ones(5), np.zeros(5)], 0.0)])
def test_one_class_or_a_non_positive_c_is_refused(y, C):
    with pytest.raises(ValueError):
        fit_logistic(np.ones((10, 3), np.float32), y, C=C)


@pytest.mark.parametrize("penalize_intercept", [False, True])
def test_a_sparse_fit_at_its_default_stop_is_at_the_optimum(penalize_intercept):
    """Newton-CG on sparse rows (Hessian-vector products), at its default stop, lands where
    L-BFGS-B on the same rows dense lands at a tight tolerance, with or without the intercept
    in the penalty."""
    x, y = _rows(3, n=2000, d=60)
    x[np.random.default_rng(4).random(x.shape) < 0.7] = 0     # sparse, as n-gram rows are
    sparse = fit_logistic(sp.csr_matrix(x), y, C=2.0, penalize_intercept=penalize_intercept)
    dense = fit_logistic(x, y, C=2.0, penalize_intercept=penalize_intercept, tol=1e-9)
    np.testing.assert_allclose(sparse.coef, dense.coef, atol=2e-4)
    assert sparse.intercept == pytest.approx(dense.intercept, abs=2e-4)
    # the right Hessian's Newton steps are taken whole: hardly more evaluations than steps
    assert sparse.iterations < 30 and sparse.evaluations <= sparse.iterations + 5
