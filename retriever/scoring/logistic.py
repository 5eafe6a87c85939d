"""Binary logistic regression on float32 rows (dense, or scipy sparse), fitted by L-BFGS-B
(dense rows) or Newton-CG (sparse rows).

The objective is the one scikit-learn's `LogisticRegression(class_weight="balanced")` minimises
(its sample weights n / (2 x the class's rows), the loss averaged by them):

    (1/n) sum_i s_i log(1 + exp(-y_i z_i)) + ||w||^2 / (2 C n),     z_i = x_i w + b

with the intercept b left out of the penalty, as its lbfgs solver does, or in it
(`penalize_intercept`), as its liblinear solver does. The objective is strictly convex, so any
solver's answer is this one's within the tolerance.

Dense rows (a few hundred columns) are fitted by scipy's L-BFGS-B with the settings
scikit-learn's lbfgs solver uses (gtol `tol`, ftol 64 eps, 50 line-search steps) from zero.
Sparse rows (hashed n-grams: hundreds of thousands of used columns) are fitted by scipy's
Newton-CG, a Newton method whose steps are solved by conjugate gradients over Hessian-vector
products (two sparse products each), as liblinear's solver is (a trust-region one): L-BFGS-B's
own work per step grows with the columns times its 10 remembered steps, which cost more than the
products with the rows, and it stopped short of the optimum (measured on the wording
classifier's fits of 43,000-71,000 rows and 300,000-380,000 used columns: 28-39 steps, 1.2-1.6 s,
an objective 0.05-0.3% above the optimum, against 8-10 Newton steps, 0.6-0.8 s, at the optimum
within 1e-6 in every gradient component). Three more things make the fits several times faster
than scikit-learn on tapt's fits:

- each step reads the rows once each way in float32 (scikit-learn multiplies float32 rows by
  float64 weights: a float64 copy of the rows per product);
- a sparse fit runs over the columns some row uses only: a feature no row has keeps weight 0
  at the optimum (its gradient is its own penalty term), and hashed n-gram fits use under half
  of their 2^20 buckets, where the solver's own vector work over every bucket cost more than
  the products with the rows;
- BLAS runs on one thread during a fit: a fit's vector operations are too small to share, and
  the threads' waiting for each other cost 2-5x the CPU time on a busy machine (measured); the
  fit is then also the same on any number of cores.

Nothing imports scikit-learn (1-2 s, more than the fits of a task).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

TOL = 1e-4
NEWTON_XTOL = 1e-5      # Newton-CG stops once its step's mean absolute component is below this


@dataclass(frozen=True)
class LogisticFit:
    """A fitted model: float32 weights, the intercept, L-BFGS iterations and function calls."""

    coef: np.ndarray
    intercept: float
    iterations: int
    evaluations: int

    def decision(self, x) -> np.ndarray:
        """The log-odds `x w + b` of rows (float32)."""
        return np.asarray(x @ self.coef, dtype=np.float32) + np.float32(self.intercept)


def fit_logistic(x, y: np.ndarray, C: float = 1.0, penalize_intercept: bool = False,
                 tol: float = TOL, max_iter: int = 500) -> LogisticFit:
    """Fit `y` (1 = positive) on the rows `x` with balanced class weights.

    Args:
        x: (n, d) rows: a numpy array or a scipy sparse matrix (made float32 CSR).
        y: (n,) labels, 0 or 1; both classes present.
        C: Inverse regularisation strength.
        penalize_intercept: Put the intercept in the penalty (liblinear's objective).
        tol: The gradient's largest component at which a fit of dense rows stops (a fit
            of sparse rows stops by its Newton step, `NEWTON_XTOL`).
        max_iter: Most iterations of the solver.

    Returns:
        The fit.

    Raises:
        ValueError: Rows of one class only, or a C that is not positive.
    """
    import scipy.sparse as sp
    from scipy.optimize import OptimizeWarning, minimize
    from threadpoolctl import threadpool_limits

    y = np.asarray(y, dtype=np.float32)
    n, width = x.shape
    positives = float(y.sum())
    if not 0 < positives < n:
        raise ValueError("a logistic regression needs rows of both classes")
    if not C > 0:
        raise ValueError("C must be positive")
    used = None
    if sp.issparse(x):
        x = x.astype(np.float32).tocsr()
        used = np.flatnonzero(np.bincount(x.indices, minlength=width))   # sorted, O(nnz)
        if len(used) < width:
            x = x[:, used]
    else:
        x = np.ascontiguousarray(x, np.float32)
    d = x.shape[1]
    share = np.where(y > 0, 1.0 / (2 * positives), 1.0 / (2 * (n - positives))).astype(
        np.float32)                                   # s_i / n
    objective = _Objective(x, y, share, 1.0 / (C * n), penalize_intercept)
    with threadpool_limits(1, user_api="blas"), warnings.catch_warnings():
        if sp.issparse(x):
            # a line search that cannot improve in float32 ends the fit where it is: at the
            # optimum to float32's precision, which scipy reports as a warning
            warnings.simplefilter("ignore", OptimizeWarning)
            found = minimize(objective.value_and_gradient, np.zeros(d + 1), jac=True,
                             hessp=objective.hessian_product, method="Newton-CG",
                             options={"maxiter": max_iter, "xtol": NEWTON_XTOL})
        else:
            found = minimize(objective.value_and_gradient, np.zeros(d + 1), jac=True,
                             method="L-BFGS-B",
                             options={"maxiter": max_iter, "maxls": 50, "gtol": tol,
                                      "ftol": 64 * np.finfo(float).eps})
    wb, iterations, evaluations = found.x, int(found.nit), int(found.nfev)
    coef = wb[:d].astype(np.float32)
    if used is not None and len(used) < width:
        coef = np.zeros(width, np.float32)
        coef[used] = wb[:d]
    return LogisticFit(coef, float(wb[d]), iterations, evaluations)


class _Objective:
    """The objective (module docstring) of float32 rows `x`, its gradient, and products with
    its Hessian at the last point whose gradient was asked (`hessian_product`, Newton-CG's)."""

    def __init__(self, x, y: np.ndarray, share: np.ndarray, penalty: float,
                 penalize_intercept: bool) -> None:
        import scipy.sparse as sp

        self.x, self.y, self.share, self.penalty = x, y, share, penalty
        self.penalize_intercept = penalize_intercept
        self.xt = x.T.tocsr() if sp.issparse(x) else x.T
        self.d = x.shape[1]
        self._at: np.ndarray | None = None      # the last point's copy and its probabilities
        self._p: np.ndarray | None = None
        self._curvature: np.ndarray | None = None

    def _log_odds(self, wb: np.ndarray) -> np.ndarray:
        return (np.asarray(self.x @ wb[:self.d].astype(np.float32), dtype=np.float32)
                + np.float32(wb[self.d]))

    def _gradient(self, wb: np.ndarray, per_row: np.ndarray) -> np.ndarray:
        """X' per_row + penalty w, and the intercept's component: the form of both the
        gradient and a Hessian-vector product."""
        out = np.empty(self.d + 1)
        out[:self.d] = np.asarray(self.xt @ per_row, dtype=np.float64) + self.penalty * wb[:self.d]
        out[self.d] = float(per_row.sum(dtype=np.float64)) + (
            self.penalty * wb[self.d] if self.penalize_intercept else 0.0)
        return out

    def value_and_gradient(self, wb: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = wb[:self.d], wb[self.d]
        z = self._log_odds(wb)
        # log(1 + exp(z)) - y z: the loss of label y at log-odds z, without overflow
        loss = np.logaddexp(np.float32(0), z) - self.y * z
        p = _sigmoid(z)
        self._at, self._p, self._curvature = wb.copy(), p, None
        value = float(np.dot(self.share.astype(np.float64), loss.astype(np.float64)))
        value += 0.5 * self.penalty * (float(w @ w) + (b * b if self.penalize_intercept
                                                       else 0.0))
        return value, self._gradient(wb, self.share * (p - self.y))

    def hessian_product(self, wb: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self._at is None or not np.array_equal(wb, self._at):
            self.value_and_gradient(wb)
        if self._curvature is None:     # once per point, only for the solver that asks
            self._curvature = self.share * self._p * (np.float32(1) - self._p)
        return self._gradient(v, self._curvature * self._log_odds(v))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) in float32, without overflow (tanh form)."""
    return (np.float32(0.5) * (np.float32(1) + np.tanh(np.float32(0.5) * z))).astype(
        np.float32, copy=False)
