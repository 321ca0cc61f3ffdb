"""Public names of a package imported on first use (PEP 562 module ``__getattr__``).

Importing a package then loads only what is asked for: the command-line tools answer
``--help`` and check options without loading TensorFlow.
"""

import importlib
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple


def lazy_names(package: str, public: Mapping[str, str], loaders: Optional[Dict[str, Callable[[], object]]] = None,
               defined: Sequence[str] = ()) -> Tuple[Callable, Callable, List[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose name ``n`` is ``public[n]``'s
    attribute ``n`` (a module path), or what ``loaders[n]()`` returns; ``defined``: public names
    the package defines itself."""
    loaders = dict(loaders or {})
    names = sorted(list(public) + list(loaders)) + list(defined)

    def __getattr__(name):
        if name in loaders:
            return loaders[name]()
        if name in public:
            return getattr(importlib.import_module(public[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return names

    return __getattr__, __dir__, names
