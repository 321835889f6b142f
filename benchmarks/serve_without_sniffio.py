"""`cachescout serve` as if `sniffio` were not installed (benchmarks/overhead.py only).

httpcore imports `sniffio` each time it creates or takes a lock; when the package is missing, every
such import fails after scanning sys.path, which is what made plain httpx proxies slow. This wrapper
reproduces exactly that cost (a real path scan, then ModuleNotFoundError), so the benchmark can show
what declaring `sniffio` buys without uninstalling anything.
"""

from __future__ import annotations

import importlib.machinery
import sys


class _NoSniffio:
    def find_spec(self, name, path=None, target=None):
        if name == "sniffio":
            importlib.machinery.PathFinder.find_spec("sniffio_absent_for_benchmark")  # the scan a miss costs
            raise ModuleNotFoundError("No module named 'sniffio'", name="sniffio")
        return None


if __name__ == "__main__":
    sys.modules.pop("sniffio", None)
    sys.meta_path.insert(0, _NoSniffio())
    from proxy.cli import main

    sys.exit(main(["serve", *sys.argv[1:]]))
