"""scripts/vm/pvgpuvm.py (the tests' VM tooling) and scripts/vm/bundle.py
(make vm-bundle), each loaded once by path: a module named pvgpuvm is
also qemu-device's package, which some tests import too."""
import importlib.util
from pathlib import Path

_DIR = Path(__file__).resolve().parents[2] / "scripts" / "vm"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vm = _load("pvgpuvm_script", _DIR / "pvgpuvm.py")
bundle = _load("vm_bundle", _DIR / "bundle.py")
