"""Deployment tests: the Debian packages and the Ansible roles,
applied to a real Debian 12 system booted with systemd.

The system is a debootstrap image (tests/deploy/make-image.sh, cached in
build/deploy/) booted under QEMU TCG with its own kernel, with a throwaway
overlay (-snapshot), reached over SSH on a loopback port forward.  One boot
and one install serve every test here, in order (each DKMS build of
pvgpu.ko takes minutes under TCG, so the packages are installed once):

1. `make deb` builds the packages and lintian reports no error; the same
   tree is built again as a later version, for the upgrade;
2. site.yml, applied to the fresh system, installs the packages (first
   run changes things, second none); pvgpud active, pvgpu.ko built by
   DKMS and loaded, pvgpu-synth runs through the installed guest library
   against the installed pvgpud (simulated device), with only
   /etc/pvgpu/guest.conf saying where;
3. on that system the packages upgrade to the later version, keeping the
   operator's edits of the conffiles, the old module gone, and purge
   leaves no file behind (compared with the system before site.yml) but
   those the playbook wrote itself: see playbook_files().

This suite runs in a process of its own: `make test-deploy`
(tests/deploy/deploy.mk; `make test` starts it in the background).
A plain `pytest` skips it, saying so.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from ports import free_tcp_port

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PVGPU_BUILD", REPO / "build"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
WORK = BUILD / "deploy"
DEB_DIR = WORK / "deb"
DEB_NEXT_DIR = WORK / "deb-next"
PACKAGES = ["pvgpu-host", "pvgpu-sim", "pvgpu-guest", "pvgpu-dkms"]

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.skipif(os.environ.get("PVGPU_DEPLOY_TESTS") != "1",
                       reason="the deploy suite boots a Debian 12 VM and runs in a "
                              "process of its own: make test-deploy (make test "
                              "starts it in the background)"),
]


def log(msg):
    print(f"[deploy {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, timeout=900, check=True, **kw):
    log("$ " + (cmd if isinstance(cmd, str) else " ".join(map(str, cmd))))
    kw.setdefault("cwd", REPO)
    p = subprocess.run(cmd, shell=isinstance(cmd, str), text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}:\n{p.stdout[-6000:]}")
    return p


def missing_tools():
    need = {"qemu-system-x86_64": "qemu-system-x86", "debootstrap": "debootstrap",
            "mke2fs": "e2fsprogs", "ssh": "openssh-client",
            "ansible-playbook": "ansible-core", "dh": "debhelper",
            "lintian": "lintian"}
    return [f"{c} ({p})" for c, p in need.items() if not shutil.which(c)]


class VM:
    """The booted Debian 12 system."""

    def __init__(self, image_dir, workdir):
        self.dir = image_dir
        self.port = free_tcp_port()
        self.key = image_dir / "id_ed25519"
        self.console = workdir / "console.log"
        # test_site_yml installed the packages (test_upgrade_purge's start)
        self.deployed = False
        self.up = False
        accel = os.environ.get("PVGPU_DEPLOY_ACCEL", "tcg")
        cmd = ["qemu-system-x86_64", "-accel", accel, "-m", "2048", "-smp", "2",
               "-nographic", "-no-reboot", "-snapshot",
               "-kernel", image_dir / "vmlinuz", "-initrd", image_dir / "initrd.img",
               "-append", "root=/dev/vda rw console=ttyS0 quiet no_timer_check",
               "-drive", f"file={image_dir / 'base.img'},if=virtio,format=raw",
               "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
               "-device", "virtio-net-pci,netdev=n0"]
        log(f"booting the Debian 12 image (accel {accel}, ssh on 127.0.0.1:{self.port})")
        self.proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL,
                                     stdout=open(self.console, "w"),
                                     stderr=subprocess.STDOUT)
        # Every command of the test's own (vm.sh, vm.put) goes through one
        # SSH connection, opened by wait_ssh: each new connection costs
        # sshd a re-exec and a key exchange, seconds of TCG.  ControlMaster=no:
        # a client never becomes a master itself (a ControlPersist master
        # started by subprocess.run would hold its output pipe open).
        # The socket's directory is short: a unix socket path has ~100 bytes.
        self.ctl_dir = tempfile.mkdtemp(prefix="pvgpu-ssh-")
        self.ssh_opts = ["-i", str(self.key), "-o", "StrictHostKeyChecking=no",
                         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                         "-o", "ConnectTimeout=10", "-o", "BatchMode=yes",
                         "-o", f"ControlPath={self.ctl_dir}/%C", "-o", "ControlMaster=no"]

    def wait_ssh(self, timeout=420):
        if self.up:
            return
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise AssertionError("qemu exited:\n" + self.console.read_text()[-4000:])
            p = subprocess.run(["ssh", *self.ssh_opts, "-p", str(self.port),
                                "root@127.0.0.1", "true"], capture_output=True,
                               timeout=60)
            if p.returncode == 0:
                log(f"ssh up after {time.time() - t0:.0f}s")
                # The shared connection (see __init__); without it the
                # commands still work, each over a connection of its own.
                # (ssh takes an option's first value: these go first.)
                subprocess.run(["ssh", "-o", "ControlMaster=yes", "-o", "ControlPersist=yes",
                                *self.ssh_opts, "-p", str(self.port),
                                "-f", "-N", "root@127.0.0.1"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)
                self.up = True
                return
            time.sleep(3)
        raise AssertionError("no ssh:\n" + self.console.read_text()[-4000:])

    def sh(self, script, timeout=900, check=True):
        p = subprocess.run(["ssh", *self.ssh_opts, "-p", str(self.port), "root@127.0.0.1",
                            "bash -s"], input=script, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"in the VM, exit {p.returncode}:\n{script}\n---\n"
                                 f"{p.stdout[-6000:]}")
        return p

    def put(self, paths, dest):
        self.sh(f"mkdir -p {dest}")
        subprocess.run(["scp", "-q", *self.ssh_opts, "-P", str(self.port),
                        *map(str, paths), f"root@127.0.0.1:{dest}/"], check=True, timeout=300)

    def stop(self):
        subprocess.run(["ssh", *self.ssh_opts, "-p", str(self.port), "-O", "exit",
                        "root@127.0.0.1"], capture_output=True, timeout=60)
        shutil.rmtree(self.ctl_dir, ignore_errors=True)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def vm():
    miss = missing_tools()
    if miss:
        pytest.skip("missing: " + ", ".join(miss) + " (scripts/install-deps.sh installs them)")
    if os.geteuid() != 0:
        pytest.skip("making the Debian image needs root (debootstrap, chroot)")
    t0 = time.time()
    run(["tests/deploy/make-image.sh", str(WORK)], timeout=1200)
    log(f"image ready in {time.time() - t0:.0f}s")
    # Booted, not waited for: the tests that log in wait for ssh
    # (VM.wait_ssh), so the boot's minute or two of TCG runs beside make
    # deb, which needs no VM.
    machine = VM(WORK, WORK)
    try:
        yield machine
    finally:
        machine.stop()


def debs(d):
    files = {}
    for name in PACKAGES:
        found = sorted(d.glob(f"{name}_*.deb"))
        assert found, f"no {name} in {d}"
        files[name] = found[-1]
    return files


# Paths whose contents change by themselves or through apt/dpkg's own
# bookkeeping, left out of the before/after comparison; also adduser's lock
# file and the module-signing key DKMS makes at its first build (DKMS's
# state, kept for every later module, not pvgpu's).
SNAPSHOT = r"""find /etc /usr /opt /srv /var/lib /var/cache /run -xdev 2>/dev/null \
  | grep -Ev '^/(var/lib/(apt|dpkg|systemd|dhcp|private)|var/cache/(apt|debconf|ldconfig|man)|run/(systemd|user|udev|log|lock|dbus|initramfs|sshd|mount|credentials)|etc/(ld\.so\.cache|passwd|group|shadow|gshadow|subuid|subgid)-?)(/|$)' \
  | grep -Ev '^/usr/lib/python3/dist-packages/.*__pycache__|^/etc/.*-$|^/run/(utmp|agetty|adduser)' \
  | grep -Ev '^/var/lib/dkms/mok\.(key|pub)$' | sort"""


def test_ansible_lint_and_role_readmes():
    """ansible/ is ansible-lint clean (production profile), and each role's
    README names every variable of its defaults/main.yml."""
    if not shutil.which("ansible-lint"):
        pytest.skip("ansible-lint missing (scripts/install-deps.sh installs it)")
    p = run(["ansible-lint", "--nocolor"], cwd=REPO / "ansible", check=False, timeout=600)
    assert p.returncode == 0, p.stdout[-6000:]
    for role in sorted((REPO / "ansible" / "roles").iterdir()):
        names = re.findall(r"^(pvgpu_\w+):", (role / "defaults" / "main.yml").read_text(), re.M)
        readme = (role / "README.md").read_text()
        missing = [n for n in names if f"`{n}`" not in readme]
        assert names and not missing, f"{role.name}/README.md lacks {missing}"


# The later package set, which only the upgrade test installs: built
# while site.yml runs in the VM (one core each on a 2-core machine)
# instead of before it, where it would wait on the critical path.
NEXT = {}


@pytest.fixture(scope="module", autouse=True)
def next_build_reaped():
    yield
    p = NEXT.pop("proc", None)
    if p and p.poll() is None:
        p.kill()
        p.wait()


def next_debs():
    """The later package set, once its build is over."""
    p = NEXT.get("proc")
    if p is None:
        pytest.fail("test_make_deb_and_lintian did not start the later build")
    t0 = time.time()
    p.wait(timeout=1800)
    log(f"the later packages' build: waited {time.time() - t0:.0f}s for it")
    out = (WORK / "deb-next.log").read_text(errors="replace")
    assert p.returncode == 0, f"exit {p.returncode}:\n{out[-6000:]}"
    return debs(DEB_NEXT_DIR)


def test_make_deb_and_lintian(request):
    """make deb builds the packages (lintian errors fail it), and the same
    tree again as a later version, for the upgrade test (without lintian:
    the same files as the first build's but for the version; started
    here, waited for by the upgrade test)."""
    # The image is debootstrapped into the build tree beside the build,
    # with /proc mounted in it while that runs; make deb's dh_clean walks
    # the whole tree and failed on the chroot's vanishing /proc entries
    # once the build finished first.  The vm fixture waits for the image
    # (make-image.sh waits for the run make test started, or makes it) and
    # starts the VM's boot, which goes on while the packages build.
    if os.geteuid() == 0 and not missing_tools():
        request.getfixturevalue("vm")
    t0 = time.time()
    p = run(["make", "deb", f"BUILD={BUILD}", f"DEB_DIR={DEB_DIR}"], timeout=1800)
    assert "E: " not in p.stdout, p.stdout[-4000:]
    debs(DEB_DIR)
    log(f"make deb took {time.time() - t0:.0f}s")
    version = run(["debian/version.sh"]).stdout.strip()
    cmd = ["make", "deb", f"BUILD={BUILD}", f"DEB_DIR={DEB_NEXT_DIR}",
           f"PVGPU_DEB_VERSION={version}+next1", "DEB_LINTIAN=no"]
    log("$ " + " ".join(cmd) + " (in the background)")
    # To a file: a pipe nobody reads until the upgrade would stall it.
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "deb-next.log", "w") as out:
        NEXT["proc"] = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT)


def recap_changed(output):
    m = re.findall(r"changed=(\d+)", output.split("PLAY RECAP")[-1])
    assert m, output[-3000:]
    return sum(map(int, m))


def test_site_yml(vm, tmp_path):
    """site.yml on the fresh system: it installs the packages and starts
    pvgpud, and a second run changes nothing."""
    vm.wait_ssh()
    # What the system holds before anything of pvgpu's, for the purge check
    # (test_upgrade_purge).
    vm.sh(SNAPSHOT + " > /root/before.txt")
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"""---
all:
  vars:
    ansible_host: 127.0.0.1
    ansible_port: {vm.port}
    ansible_user: root
    ansible_ssh_private_key_file: {vm.key}
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    pvgpu_deb_dir: {DEB_DIR}
  children:
    pvgpu_hosts:
      hosts:
        deploy-vm:
      vars:
        pvgpu_host_executor: auto
        pvgpu_host_metrics: 127.0.0.1:9400
        pvgpu_host_vms:
          - name: operator
            uid: 0
            memory: 4G
            max_sessions: 4
            weight: 2
    pvgpu_guests:
      hosts:
        deploy-vm:
      vars:
        pvgpu_guest_devices:
          - unix:///run/pvgpu/pvgpu.sock
    pvgpu_xen_hosts:
      hosts: {{}}
    pvgpu_rdma_nodes:
      hosts: {{}}
""")
    # On loopback, ssh's compression (Ansible's default ssh_args have -C)
    # only costs CPU at both ends, the guest's under TCG; the connection
    # persists from the first run into the second.  ansible.log: when each
    # task began (ansible-core has no profile_tasks).
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible" / "ansible.cfg"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=900s",
               ANSIBLE_LOG_PATH=str(tmp_path / "ansible.log"))
    cmd = ["ansible-playbook", "-i", str(inv), "ansible/site.yml"]
    t0 = time.time()
    first = run(cmd, env=env, timeout=1800)
    log(f"site.yml, first run: {time.time() - t0:.0f}s")
    vm.deployed = True
    assert recap_changed(first.stdout) > 0, first.stdout[-3000:]
    assert "SIMULATED device" in first.stdout
    t0 = time.time()
    second = run(cmd, env=env, timeout=1800)
    log(f"site.yml, second run: {time.time() - t0:.0f}s")
    assert recap_changed(second.stdout) == 0, second.stdout[-5000:]

    out = vm.sh("set -e; systemctl is-active pvgpud; dkms status pvgpu; "
                "grep '^pvgpu ' /proc/modules; cat /etc/pvgpu/guest.conf; "
                "test -S /run/pvgpu/pvgpu.sock; id pvgpu; "
                "pvgpuctl session list").stdout
    assert out.startswith("active"), out
    # root's pvgpuctl finds the service's admin socket without being told
    assert re.search(r"^SESSION +VM +STATE", out, re.M), out
    assert re.search(r"pvgpu/\S+, \S+, x86_64: installed", out), out
    assert "unix:///run/pvgpu/pvgpu.sock" in out
    # The benchmark through the installed library, told where pvgpud is by
    # guest.conf alone: no PVGPU_DEVICES, no LD_LIBRARY_PATH.  A short
    # fixed plan (tests/deploy/synth-tiny.plan: 16 steps): --quick
    # calibrates for minutes on the simulated device under TCG.
    vm.put([Path(__file__).with_name("synth-tiny.plan")], "/root")
    t0 = time.time()
    p = vm.sh("set -e; env -u PVGPU_DEVICES -u LD_LIBRARY_PATH "
              "pvgpu-synth --plan /root/synth-tiny.plan 2>&1; "
              "journalctl -u pvgpud --no-pager -o cat | grep 'session ' | tail -n 4",
              timeout=900)
    log(f"pvgpu-synth took {time.time() - t0:.0f}s")
    out = p.stdout
    # Its runtime is linked in; the driver it loaded is the package's.
    assert re.search(r"^pvgpu-synth: CUDA driver (/usr)?/lib/x86_64-linux-gnu/"
                     r"libcuda\.so\.1 \(pvgpu's front-end\)", out, re.M), out[-4000:]
    assert "pvgpu simulated device" in out, out[-4000:]
    assert re.search(r"h2d pinned 90/10 +16 ", out), out[-4000:]
    # pvgpud saw the session, as VM "operator" (the role's policy: uid 0).
    assert re.search(r"session \d+ start: uid=0,.* via unix:///run/pvgpu/pvgpu.sock, vm operator", out), out[-4000:]
    assert re.search(r"session \d+ end: .*vm operator", out), out[-4000:]


# What site.yml writes itself, beside the packages' files: the copies of
# the packages it installed (pvgpu_*_deb_dir) and the modules-load.d entry
# (pvgpu_guest_load_module).  dpkg knows neither, so purging the packages
# leaves them, as it leaves any file an operator wrote; the playbook's
# files are the playbook's to remove.  Everything else must go.
def playbook_files(deb_files):
    return {"/etc/modules-load.d/pvgpu.conf", "/var/cache/pvgpu-debs"} | {
        f"/var/cache/pvgpu-debs/{p.name}" for p in deb_files}


def test_upgrade_purge(vm):
    """On the system site.yml installed: the operator edits the conffiles,
    the packages upgrade to a later version keeping the edits (the old
    version's module gone), and purge leaves no file of theirs behind."""
    if not vm.deployed:
        pytest.fail("test_site_yml did not install the packages; "
                    "this test upgrades and purges what it installed")
    old, new = debs(DEB_DIR), next_debs()
    vm.put(new.values(), "/root/new")
    out = vm.sh("dpkg-query -W -f '${Package} ${Version}\\n' 'pvgpu-*'").stdout
    assert sorted(out.split()) == sorted(
        [n for n in PACKAGES] + [p.name.split("_")[1] for p in old.values()]), out
    apt = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
    # The operator edits the conffiles; the upgrade keeps them.
    vm.sh("set -e; echo '; edited by the operator' >> /etc/pvgpu/pvgpud.conf; "
          "echo '# edited by the operator' >> /etc/pvgpu/guest.conf")
    t0 = time.time()
    vm.sh(f"set -e; {apt} /root/new/*.deb")
    log(f"upgrade took {time.time() - t0:.0f}s")
    out = vm.sh("set -e; dpkg-query -W -f '${Package} ${Version}\\n' 'pvgpu-*'; "
                "grep -c 'edited by the operator' /etc/pvgpu/pvgpud.conf /etc/pvgpu/guest.conf; "
                "systemctl is-active pvgpud; dkms status pvgpu").stdout
    assert len(re.findall(r"^pvgpu-[a-z]+ \S+\+next1$", out, re.M)) == 4, out
    assert "pvgpud.conf:1" in out and "guest.conf:1" in out, out
    assert re.search(r"pvgpu/\S+\+next1, \S+, x86_64: installed", out), out
    assert len(re.findall(r"^pvgpu/", out, re.M)) == 1, out   # the old version's module is gone
    t0 = time.time()
    vm.sh("set -e; DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(PACKAGES))
    log(f"purge took {time.time() - t0:.0f}s")
    vm.sh(SNAPSHOT + " > /root/after.txt")
    diff = vm.sh("diff /root/before.txt /root/after.txt", check=False).stdout
    removed = {line[2:] for line in diff.splitlines() if line.startswith("< ")}
    left = {line[2:] for line in diff.splitlines() if line.startswith("> ")}
    assert not removed, "purge removed files:\n" + diff
    assert left == playbook_files(old.values()), \
        "purge left files (beside the playbook's own):\n" + diff
    out = vm.sh("dpkg -l 'pvgpu*' 2>&1 | grep -c '^[ri]' || true; "
                "ls /var/lib/dkms /lib/modules/*/updates 2>&1; "
                "systemctl list-unit-files 'pvgpu*' --no-legend", check=False).stdout
    assert "pvgpu" not in out.replace("No such file", ""), out
