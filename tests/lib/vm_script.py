"""scripts/vm/pvgpuvm.py, the tests' VM tooling, loaded once by path: a
module named pvgpuvm is also qemu-device's package, which some tests
import too."""
import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "vm" / "pvgpuvm.py"
_spec = importlib.util.spec_from_file_location("pvgpuvm_script", _PATH)
vm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vm)
