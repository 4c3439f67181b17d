"""Writes the scipy `.npz` fixtures of popcorn-io's tests (run once; the files are committed).

Run from this folder with a Python that has numpy and scipy: `python make_npz_fixtures.py`.
"""

import numpy as np
import scipy.sparse as sp

# A 4 x 5 CSR matrix with an empty row: float64 values, int32 indices, deflated entries.
X = sp.csr_matrix(
    np.array(
        [
            [1.0, 0, 0, 2.5, 0],
            [0, 0, 0, 0, 0],
            [0, -3.0, 0, 0, 4.0],
            [0.5, 0, 6.0, 0, 0],
        ]
    )
)
sp.save_npz("csr_f64.npz", X, compressed=True)

# The same as a csr_array (scipy adds `_is_array.npy`): float32 values, int64 indices, stored
# (uncompressed) entries.
Y = sp.csr_array(X.astype(np.float32))
Y.indices = Y.indices.astype(np.int64)
Y.indptr = Y.indptr.astype(np.int64)
sp.save_npz("csr_f32_i64_stored.npz", Y, compressed=False)

# Unsorted column indices with a duplicate in row 0 (columns 3, 0, 3); row 1 empty.
Z = sp.csr_matrix(
    (np.array([2.0, 1.0, 0.5]), np.array([3, 0, 3], dtype=np.int32), np.array([0, 3, 3])),
    shape=(2, 4),
)
assert not Z.has_canonical_format
sp.save_npz("csr_unsorted.npz", Z, compressed=True)

# A CSC matrix, which the reader refuses with how to convert it.
sp.save_npz("csc.npz", X.tocsc())

# The command-line test's points (tests/data/topics.npz of the workspace): 60 points of 300
# features in 3 topics of 100 features each, 4 entries a point (density 1.3%).
rows, cols, vals = [], [], []
for i in range(60):
    topic = i % 3
    features = sorted({topic * 100 + (i * 7 + j * 13) % 100 for j in range(4)})
    for j, col in enumerate(features):
        rows.append(i)
        cols.append(col)
        vals.append(1.0 + 0.25 * j)
T = sp.csr_matrix((vals, (rows, cols)), shape=(60, 300))
sp.save_npz("../../../tests/data/topics.npz", T)
