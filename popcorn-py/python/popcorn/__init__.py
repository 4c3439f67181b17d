"""popcorn from Python: Kernel K-means as a scikit-learn estimator, and popcorn's matrix DSL.

One engine for both: the Rust library, which runs on an NVIDIA GPU where one and the CUDA
libraries are found (loaded at run time) and otherwise on the CPU.

>>> import numpy as np, popcorn
>>> X = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
>>> km = popcorn.KernelKMeans(2, gamma=1.0, device="cpu").fit(X)
>>> km.predict([[0.05], [4.9]]).tolist() == [km.labels_[0], km.labels_[3]]
True
>>> p = popcorn.Program("fn scale(x: Col[n], a: Scalar) -> (y: Col[n]) { y = a * x; }")
>>> popcorn.Context("cpu", "float64").run(p, x=[1.0, 2.0], a=3.0)["y"].tolist()
[3.0, 6.0]

- :class:`KernelKMeans`: the estimator (``fit``, ``predict``, ``fit_predict``).
- :class:`Program`: a program parsed and checked (:class:`DslError` if it is wrong);
  ``program.plan(n=..., ...)`` gives a :class:`Plan` (``str(plan)``, ``plan.dot()``,
  ``plan.cuda()``).
- :class:`Context`: runs programs on numpy arrays (``ctx.run(program, **arguments)``).
- :func:`device_info`: the GPU popcorn found, or why none.
"""

from ._native import Context, DslError, Plan, Program, device_info

__all__ = ["KernelKMeans", "Program", "Plan", "Context", "DslError", "device_info"]


def __getattr__(name):
    # The estimator imports scikit-learn; the DSL alone does not need it.
    if name == "KernelKMeans":
        from ._estimator import KernelKMeans

        return KernelKMeans
    raise AttributeError(f"module 'popcorn' has no attribute {name!r}")
