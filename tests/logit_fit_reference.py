"""Reference solve of the logit fit: sparse least squares with scipy ``lsqr`` (slow).

Used by the tests and ``benchmarks/bench_logit_fit.py`` to check
``posgen.harness.additive_fit.logit_fit`` independently: it builds the design matrix X
explicitly and never uses the structured normal equations.
"""

from __future__ import annotations

import numpy as np


def reference_fit(logits: np.ndarray, mask: np.ndarray, two_axis: bool = False) -> dict:
    """Reference: sparse least squares with scipy ``lsqr`` at tight tolerance (slow, for tests).

    ``logits`` [n, n], ``mask`` [n, n] bool. Returns r (Pearson, fitted vs actual), the
    row-centred r and the fitted values over the mask entries (row-major order).
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import lsqr

    n = mask.shape[0]
    i, j = np.nonzero(mask)
    w = logits[i, j].astype(np.float64)
    cols = [i - j, 2 * n + j] if two_axis else [i - j, n + i, 2 * n + j]
    x = sp.csr_matrix(
        (
            np.ones(len(i) * len(cols)),
            (np.repeat(np.arange(len(i)), len(cols)), np.stack(cols, 1).ravel()),
        ),
        shape=(len(i), 3 * n),
    )
    sol = lsqr(x, w, atol=1e-15, btol=1e-15, conlim=1e12, iter_lim=200_000)[0]
    fitted = x @ sol
    row_mean = lambda v: np.bincount(i, v, n)[i] / np.bincount(i, None, n)[i]  # noqa: E731
    return {
        "r": float(np.corrcoef(fitted, w)[0, 1]),
        "r_row_centred": float(np.corrcoef(fitted - row_mean(fitted), w - row_mean(w))[0, 1]),
        "fitted": fitted,
    }
