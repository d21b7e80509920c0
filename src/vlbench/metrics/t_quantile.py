"""Student t quantiles: scipy's own compiled `stdtrit`, loaded without scipy.special's package
initialisation.

Every evaluation, few-shot and probe job needs one function of scipy, `stdtrit` (the t
quantiles of its intervals, bit for bit those of ``scipy.stats.t``). `import scipy.special`
costs such a job about 0.19 s of its 0.5 s: the package's `__init__` loads scipy's array-API
layer, which imports numpy.testing and more. The function itself lives in the compiled module
`scipy.special._ufuncs`, which loads in about 0.05 s and needs only its sibling extension
modules. While it loads, a bare module with the package's `__path__` stands in for
`scipy.special`; the stand-in is removed afterwards, so a later ``import scipy.special`` in the
same process runs the package's own `__init__`, which takes the loaded `_ufuncs` from
`sys.modules`. Where the package is already imported, or the stand-in fails (another scipy
layout), the package is imported as usual. Same compiled function either way, same bits
(tests/metrics/test_statistics.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from functools import cache

PACKAGE = "scipy.special"


@cache
def _stdtrit() -> Callable[[float, float], float]:
    if PACKAGE not in sys.modules:
        import scipy

        stand_in = types.ModuleType(PACKAGE)
        stand_in.__path__ = [f"{folder}/special" for folder in scipy.__path__]
        sys.modules[PACKAGE] = stand_in
        try:
            return importlib.import_module(f"{PACKAGE}._ufuncs").stdtrit
        except ImportError:
            pass
        finally:
            if sys.modules.get(PACKAGE) is stand_in:
                del sys.modules[PACKAGE]
    return importlib.import_module(PACKAGE).stdtrit


def student_t_quantile(degrees: int, probability: float) -> float:
    """The `probability` quantile of Student's t with `degrees` degrees of freedom
    (``scipy.special.stdtrit``)."""
    return float(_stdtrit()(degrees, probability))
