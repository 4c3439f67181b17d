"""The scikit-learn estimator: parameters and input checks follow scikit-learn's conventions;
the fit and the predictions are popcorn's (``popcorn._native``)."""

import inspect
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from . import _native

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # older: the estimator's own method

    def _validate_data(estimator, X, **kwargs):
        return estimator._validate_data(X, **kwargs)


# scikit-learn >= 1.6 names the non-negativity switch ensure_non_negative, older ones
# only_non_negative.
_NON_NEGATIVE = (
    "ensure_non_negative"
    if "ensure_non_negative" in inspect.signature(_check_sample_weight).parameters
    else "only_non_negative"
)


def _dtype_name(dtype):
    """The numpy name of ``dtype`` (``"float32"`` for ``np.float32``, ``"float32"``...)."""
    try:
        return np.dtype(dtype).name
    except TypeError as e:
        raise ValueError(f"dtype={dtype!r} is not a numpy dtype; use 'float32' or 'float64'") from e


def _memory_limit_text(limit):
    """``memory_limit`` as the native side reads it: ``None``, or bytes as text (``"2G"``)."""
    if limit is None:
        return None
    if isinstance(limit, (bool, np.bool_)):
        raise ValueError(f"memory_limit={limit!r}; give None, bytes, or a string such as '2G'")
    if isinstance(limit, (int, np.integer)):
        if limit <= 0:
            raise ValueError(f"memory_limit={limit!r}; give a positive number of bytes")
        return str(int(limit))
    if isinstance(limit, str):
        return limit
    raise ValueError(f"memory_limit={limit!r}; give None, bytes, or a string such as '2G'")


def _csr_arrays(X):
    """The ``indptr``, ``indices``, ``data`` and ``shape`` of the CSR matrix ``X``, its indices
    sorted and duplicates summed (on a copy: ``X`` is left as it is)."""
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X.indptr, X.indices, X.data, X.shape


class KernelKMeans(ClusterMixin, BaseEstimator):
    """Kernel K-means: k-means in the feature space of a kernel, on a GPU or the CPU.

    ``X`` may be dense (array-like) or a ``scipy.sparse`` matrix or array: CSR is used as
    it is, other formats are converted to CSR, and the points stay sparse (the kernel matrix
    is built from them without densifying where popcorn's planner finds that cheaper, then
    stored). Sparse points cannot be z-scored (``zscore=True``) nor be a precomputed kernel
    matrix.

    The kernel matrix ``K`` is built from the points (or given, with
    ``kernel="precomputed"``); each iteration assigns every point to the nearest centroid in
    feature space, ``||phi(x_i) - c_j||^2 = K_ii - 2 mean_{l in j} K_il + mean_{l,m in j} K_lm``,
    until no label changes (or, with ``tol > 0``, until the objective improves by less than
    ``tol`` relative to its value), or ``max_iter``. popcorn chooses between storing ``K`` and
    recomputing its tiles every iteration by its cost model and the free memory.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    kernel : {"rbf", "linear", "poly", "sigmoid", "precomputed"}, default="rbf"
        ``"gaussian"`` and ``"polynomial"`` are accepted too. With ``"precomputed"``, ``X`` in
        ``fit`` is the ``n x n`` kernel matrix and ``X`` in ``predict`` the ``m x n`` kernel
        values of new points against the training points.
    gamma : float, default=None
        Scale of the rbf, poly and sigmoid kernels; ``None`` means ``1 / n_features``.
    coef0 : float, default=1.0
        Offset of the poly and sigmoid kernels.
    degree : float, default=2
        Exponent of the poly kernel: ``(gamma <x, y> + coef0) ** degree``.
    init : {"mod", "random", "k-means++"} or array of shape (n_samples,), default="mod"
        First labels: point ``i`` in cluster ``i mod n_clusters``, uniformly random labels,
        k-means++ in feature space, or the given labels.
    n_init : int, default=1
        Runs from different seeds for the random inits; the lowest objective wins.
    max_iter : int, default=300
        Iteration limit of a run.
    tol : float, default=1e-4
        Relative improvement of the objective under which a run stops; 0 runs until no label
        changes (a fixed point always stops a run).
    zscore : bool, default=False
        Standardise every feature (learned on the training points) first.
    device : str, default="auto"
        ``"auto"`` (the first usable GPU, else the CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or
        several GPUs of this machine, ``"cuda:0,1"`` or ``"cuda:all"`` (the points split over
        them, one share each, exchanging through NCCL).
    dtype : {"float32", "float64"}, default="float32"
        Element type of the computation.
    kernel_storage : {None, "float32", "bfloat16", "float16"}, default=None
        How a stored kernel matrix is held: in ``dtype`` (``None``, ``"float32"``), or in 16
        bits, written and read in half the bytes while every step computes in float32 (float32
        fits only). ``"bfloat16"`` keeps float32's range with 8 significant bits;
        ``"float16"`` keeps 11 bits up to 65504: where the kernel's values could pass half of
        that, K is held times a power of two (no label changes; ``inertia_`` is unscaled).
    precision : {None, "float32", "tf32", "bfloat16", "float16", "3xtf32"}, default=None
        How the kernel's products multiply their float32 operands on a GPU: strictly (``None``,
        ``"float32"``), on TF32 tensor cores (``"tf32"``, 11 significant bits per operand), or
        with both operands rounded to 16 bits on 16-bit tensor cores (``"bfloat16"``, 8 bits
        and float32's range; ``"float16"``, 11 bits up to 65504, an error naming the fix where
        the points pass it), or as three TF32 products of split operands (``"3xtf32"``, about
        float32's accuracy on tensor cores), every product accumulated in float32. The
        library's products (cuBLAS) run in TF32 under the 16-bit ones. The CPU, and float64
        fits, compute strictly.
    algorithm : {"auto", "stored", "recompute", "features"}, default="auto"
        How the kernel matrix is had: ``"stored"`` (built once, ``n^2`` values),
        ``"recompute"`` (its tiles recomputed every iteration, never stored), ``"features"``
        (polynomial kernels of degree 1 or 2: the linear kernel on the kernel's explicit
        features, ``(d + 1) (d + 2) / 2`` at most, no ``n x n`` value), or ``"auto"`` (the
        fastest the cost model finds that fits in memory).
    memory_limit : int, str or None, default=None
        The most memory (GPU, or host on the CPU) the fit's plans count as free: bytes, or a
        string such as ``"2G"`` or ``"1536M"`` (powers of 1024). ``"auto"`` takes no stored
        kernel matrix beyond it, and ``"features"`` builds its features block of rows by block
        every iteration, never whole, where they do not fit it (``feature_block_rows_`` says
        how many rows). It steers those choices; it does not cap the device's own allocations,
        an algorithm asked for by name, or ``"recompute"``'s memory (linear in n and d).
    random_state : int, RandomState instance or None, default=None
        Seeds the random inits.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster of every training point.
    n_iter_ : int
        Iterations of the best run.
    inertia_ : float
        The objective of the final labels, ``sum_i w_i ||phi(x_i) - c_{labels_i}||^2`` with
        ``w_i`` the ``sample_weight`` of ``fit`` (1 without weights; ``tr(K)`` included), so
        in units of the weights: multiplying every weight by ``c`` multiplies it by ``c``.
    objective_history_ : ndarray
        The objective at the start of every iteration of the best run.
    converged_ : bool
        Whether the best run stopped before ``max_iter``.
    n_features_in_ : int
        Features seen in ``fit``.
    feature_names_in_ : ndarray of str
        Column names seen in ``fit``, when ``X`` had string column names.
    cluster_sizes_ : ndarray of shape (n_clusters,)
        Points per cluster (counted, not weighted). With ``sample_weight`` a cluster of only
        zero-weight points is empty (no centroid; ``predict`` never picks it) and still counts
        its points here.
    timings_ : dict
        Seconds per phase: ``upload``, ``kernel_matrix``, ``init``, ``iterations``,
        ``per_iteration`` (a list), ``total``.
    device_ : str
        The device the fit ran on, in words.
    algorithm_ : str
        ``"stored"``, ``"recompute"`` or ``"features"``: how the kernel matrix was had.
    feature_block_rows_ : int
        With ``"features"``, the rows of the blocks its features were built in every
        iteration where they did not fit in memory whole (``memory_limit``); else 0.
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        kernel="rbf",
        gamma=None,
        coef0=1.0,
        degree=2,
        init="mod",
        n_init=1,
        max_iter=300,
        tol=1e-4,
        zscore=False,
        device="auto",
        dtype="float32",
        kernel_storage=None,
        precision=None,
        algorithm="auto",
        memory_limit=None,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.coef0 = coef0
        self.degree = degree
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.zscore = zscore
        self.device = device
        self.dtype = dtype
        self.kernel_storage = kernel_storage
        self.precision = precision
        self.algorithm = algorithm
        self.memory_limit = memory_limit
        self.random_state = random_state

    def _check_input(self, X, reset):
        """``X`` as float64 values: a C-ordered array, or a CSR matrix for sparse input.
        Kernel values (``kernel="precomputed"``) must be dense. ``zscore=True`` with sparse
        points is refused in ``fit`` (``reset``) only: ``predict`` takes sparse points on a
        z-scored model of dense points (made dense and z-scored as its training points)."""
        if sp.issparse(X):
            if self.kernel == "precomputed":
                raise ValueError(
                    'kernel="precomputed" takes the kernel matrix as a dense array, not a '
                    "scipy.sparse matrix; pass X.toarray()"
                )
            if self.zscore and reset:
                raise ValueError(
                    "zscore=True would make sparse points dense (every feature shifted by its "
                    "mean); scale them beforehand, or pass X.toarray() to z-score dense points"
                )
        return _validate_data(
            self, X, reset=reset, dtype=np.float64, order="C", accept_sparse="csr"
        )

    def fit(self, X, y=None, sample_weight=None):
        """Clusters ``X`` (array-like or scipy sparse matrix of shape (n_samples,
        n_features), or the dense kernel matrix for ``kernel="precomputed"``). ``y`` is
        ignored. Returns the fitted estimator.

        ``sample_weight`` (array-like of shape (n_samples,), a number, or ``None`` for all
        ones) weighs the points: a centroid is the weighted mean of its points in feature
        space and ``inertia_`` is ``sum_i w_i ||phi(x_i) - c_{label_i}||^2``, so integer
        weights act as repeating each point that many times. Weights are finite and
        non-negative, not all zero; a zero-weight point is labelled (nearest centroid) but
        moves no centroid. k-means++ draws centers by weight.

        The GIL is released while popcorn works; Ctrl-C stops the fit between iterations
        (``KeyboardInterrupt``)."""
        X = self._check_input(X, reset=True)
        if sample_weight is not None:
            # scikit-learn's rules: a number is every point's weight, an array needs one
            # weight per point; negative weights are rejected (the library checks the rest).
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, **{_NON_NEGATIVE: True}
            )
        # scikit-learn's message (its checks look for it); the library checks the rest,
        # a precomputed kernel matrix being square included.
        n_samples = X.shape[0]
        if isinstance(self.n_clusters, numbers.Integral) and self.n_clusters > n_samples:
            raise ValueError(
                f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}."
            )
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        options = {
            "n_clusters": self.n_clusters,
            "kernel": self.kernel,
            "gamma": self.gamma,
            "coef0": self.coef0,
            "degree": self.degree,
            "init": self.init,
            "seed": seed,
            "n_init": self.n_init,
            "max_iter": self.max_iter,
            "tol": self.tol,
            "zscore": self.zscore,
            "device": self.device,
            "dtype": _dtype_name(self.dtype),
            "kernel_storage": self.kernel_storage,
            "precision": self.precision,
            "algorithm": self.algorithm,
            "memory_limit": _memory_limit_text(self.memory_limit),
        }
        if sp.issparse(X):
            result, model = _native.fit_sparse(*_csr_arrays(X), options, sample_weight)
        else:
            result, model = _native.fit(X, options, sample_weight)
        self._model = model
        self.labels_ = result["labels"]
        self.n_iter_ = result["n_iter"]
        self.inertia_ = result["objective"]
        self.objective_history_ = result["objective_history"]
        self.converged_ = result["converged"]
        self.cluster_sizes_ = np.bincount(self.labels_, minlength=self.n_clusters)
        self.timings_ = result["timings"]
        self.device_ = result["device"]
        self.algorithm_ = result["algorithm"]
        self.feature_block_rows_ = result["feature_block_rows"]
        return self

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fits ``X`` (weighted by ``sample_weight``, as ``fit``) and returns ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def predict(self, X):
        """The nearest centroid in feature space of every row of ``X`` (new points, dense or
        scipy sparse, or for ``kernel="precomputed"`` their dense kernel values against the
        training points). Sparse points on a model fitted on sparse points stay sparse; on a
        model of dense points they are made dense (z-scored where the fit was)."""
        check_is_fitted(self)
        X = self._check_input(X, reset=False)
        if sp.issparse(X):
            return self._model.predict_sparse(*_csr_arrays(X))
        return self._model.predict(X)

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.input_tags.sparse = self._accepts_sparse()
        return tags

    def _accepts_sparse(self):
        """Whether ``fit`` takes sparse points with these parameters."""
        return self.kernel != "precomputed" and not self.zscore

    def _more_tags(self):  # scikit-learn < 1.6
        return {"pairwise": self.kernel == "precomputed"}

    def __getstate__(self):
        # The fitted model is Rust data: pickled as its parts (arrays and numbers).
        state = super().__getstate__()
        if isinstance(state.get("_model"), _native.NativeModel):
            state = dict(state, _model=state["_model"].parts())
        return state

    def __setstate__(self, state):
        parts = state.get("_model")
        if isinstance(parts, dict):
            device = state.get("device", "auto")
            state = dict(state, _model=_native.NativeModel.from_parts(parts, device))
        super().__setstate__(state)
