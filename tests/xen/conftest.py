"""The one Xen boot that test_xen_boot.py and test_xen_pvgpud.py share
(xen_scenario.py): booting dom0 and creating its domUs is most of either
file's CPU under TCG, so `make test-xen` does it once."""
import importlib.util
from pathlib import Path

import pytest


def _load():
    spec = importlib.util.spec_from_file_location(
        "xen_scenario", Path(__file__).resolve().parent / "xen_scenario.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def xen_boot(tmp_path_factory):
    """(status, console, seconds) of the shared boot."""
    return _load().boot(tmp_path_factory.mktemp("xen"))
