"""Each paper's experiment half, on top of the library.

The library (parts, variants, tasks, training, sweeps, analysis, commands) knows no paper.
What exists only to test one paper's claims lives in its package here and registers itself
the way parts do: a construction preset (`constructions.CONSTRUCTIONS`), report sections
(`sweep.report.SECTIONS`), a reference mark on budget curves (`sweep.curve.MARKS`). No
module outside this folder imports a paper's package (tests/test_layers.py); importing
`modformer` imports every package here once, so that what they register is there.

A new paper's experiments join as one package `modformer/papers/<paper>/` whose
`__init__.py` imports the modules that register (docs/contributing.md).
"""

import importlib
import pkgutil

for _paper in pkgutil.iter_modules(__path__, __name__ + "."):
    importlib.import_module(_paper.name)
