"""make vm-bundle's archive (scripts/vm/bundle.py), built once per run and
unpacked as the GPU host takes it: test_guest_vm.py boots its two guests
with the bundle's QEMU, vhost-device-vsock, kernel and pvgpu.ko instead of
the system's (no boot of its own: a TCG boot is 100 CPU-seconds), and
test_vm_bundle.py builds it a second time to compare."""
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from vm_script import bundle

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")




@pytest.fixture(scope="session")
def bundle_script():
    """scripts/vm/bundle.py, loaded."""
    return bundle


@pytest.fixture(scope="session")
def vm_bundle(tmp_path_factory):
    """The bundle's path, built here once from the system's QEMU,
    vhost-device-vsock and kernel as make vm-bundle builds it; skip, saying
    why, where this machine lacks any of them."""
    out = tmp_path_factory.mktemp("vm-bundle") / "vm-bundle.tar.xz"
    with pytest.MonkeyPatch.context() as mp:
        for key in bundle.ENV_VARS:
            mp.delenv(key, raising=False)
        try:
            bundle.build_bundle(out, BUILD)
        except bundle.TooBig:
            raise
        except bundle.BundleError as e:
            pytest.skip(f"no VM bundle can be made here: {e}")
    return out


def system_qemu_folders():
    """The folders of the system's QEMU data (firmware, `-L help`) and
    modules: what a machine without QEMU lacks."""
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        return []
    found = bundle.qemu_data_dirs(qemu) + [bundle.qemu_module_dir(qemu)]
    return sorted({str(d) for d in found if d and d.is_dir()})


def hiding_launcher(path, qemu, folders):
    """Write `path`: a QEMU launcher that runs `qemu` with nothing in its
    environment but PATH, in a mount namespace where `folders` are empty,
    as on a machine without QEMU.  Returns False where no mount namespace
    can be made here (not root)."""
    mounts = "".join(f"mount -t tmpfs -o ro,size=4k none {shlex.quote(d)} || exit 1\n"
                     for d in folders)
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", mounts or "true"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return False
    inner = shlex.quote(mounts + 'exec "$0" "$@"')
    Path(path).write_text(
        "#!/bin/sh\n"
        "exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin unshare --mount -- sh -c "
        f'{inner} {shlex.quote(str(qemu))} "$@"\n')
    os.chmod(path, 0o755)
    return True


@pytest.fixture(scope="module")
def vm_bundle_env(vm_bundle, tmp_path_factory):
    """The bundle unpacked, and the environment its `env` prints set for
    this module (restored after it), PVGPU_QEMU then replaced by a launcher
    that hides the system's QEMU data and modules (hiding_launcher).
    Yields {"dir", "env", "qemu", "hidden": the folders hidden}."""
    where = tmp_path_factory.mktemp("vm-bundle-unpacked")
    env = bundle.unpack(vm_bundle, where)
    top = where / bundle.TOP
    folders = system_qemu_folders()
    hide = where / "qemu-hidden"
    hidden = folders if hiding_launcher(hide, env["PVGPU_QEMU"], folders) else None
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        if hidden is not None:
            mp.setenv("PVGPU_QEMU", str(hide))
        yield {"dir": top, "env": env, "qemu": os.environ["PVGPU_QEMU"], "hidden": hidden}
