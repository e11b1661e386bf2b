"""Shared pytest fixtures: paths into the build, a running pvgpud, and
helpers that run the CUDA test programs (tests/programs/*.cu) natively or
through pvgpu: NVIDIA's libcudart.so.13 over pvgpu's libcuda.so.1, as a
program in a VM runs.

The build directory comes from PVGPU_BUILD (default "build", relative to the
repository root), so the same tests run against the sanitizer build.
"""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "lib"))
from pvgpu_asan import asan_runtime, preload_for  # noqa: E402
from ports import free_tcp_port  # noqa: E402,F401

BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPUD = BUILD / "bin" / "pvgpud"
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
PROGRAM_DIR = BUILD / "tests"

# One entry per tests/programs/NAME.cu; known from the sources so that
# collection works before anything is built.
PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs").glob("*.cu"))

# Generous: the sanitizer build on a 2-core CI machine is slow.
PROGRAM_TIMEOUT = float(os.environ.get("PVGPU_TEST_TIMEOUT", "300"))
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

# The token pvgpud expects from TCP clients in the tests.
TCP_TOKEN = "testvm"

# What a sanitizer prints when it finds something; any of these in a log
# fails the test even when the process exited cleanly.
SANITIZER_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "runtime error:",  # UBSan
)


def tail(text, lines=60):
    return "\n".join(text.splitlines()[-lines:])


def sanitizer_report(text):
    for marker in SANITIZER_MARKERS:
        if marker in text:
            return marker
    return None


def program_path(name):
    path = PROGRAM_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is not built (run `make test-programs`)")
    return path


def unix_uri(path):
    return f"unix://{path}"  # path is absolute, so unix:///...


class Daemon:
    """A running pvgpud listening on a Unix socket and a TCP port."""

    def __init__(self, executor, workdir, extra_args=(), env=None):
        self.executor = executor
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.workdir = workdir
        self.sock_path = workdir / "pvgpu.sock"
        self.unix = unix_uri(self.sock_path)
        self.tcp = None     # tcp://127.0.0.1:PORT, the port pvgpud got
        self.log_path = workdir / "pvgpud.log"
        self.proc = None

    def start(self):
        if not PVGPUD.exists():
            pytest.fail(f"{PVGPUD} is not built (run `make`)")
        ready_r, ready_w = os.pipe()
        cmd = [
            str(PVGPUD),
            "--listen", self.unix,
            "--listen", "tcp://127.0.0.1:0",
            "--executor", self.executor,
            "--log-level", "debug",
            "--module-cache", str(self.workdir / "modules"),
            "--ready-fd", str(ready_w),
        ] + self.extra_args
        # stderr to a file, not a pipe: a chatty debug log must never block
        # the daemon on a full pipe.
        self._log_file = open(self.log_path, "wb")
        env = None
        if self.extra_env:
            env = dict(os.environ)
            env.update(self.extra_env)
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=self._log_file,
                stderr=subprocess.STDOUT, cwd=self.workdir, env=env,
                pass_fds=(ready_w,))
        finally:
            os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            self._wait_ready(ready)

    def _wait_ready(self, ready):
        """Until pvgpud says, through --ready-fd, that it listens: the
        port its tcp:// listener got is in that report."""
        deadline = time.monotonic() + START_TIMEOUT
        said = b""
        while time.monotonic() < deadline:
            if select.select([ready], [], [], 0.1)[0]:
                chunk = os.read(ready.fileno(), 4096)
                said += chunk
                lines = said.decode(errors="replace").splitlines()
                if "ready" in lines:
                    self.listening = [ln.split(" ", 1)[1] for ln in lines
                                      if ln.startswith("listening ")]
                    self.tcp = next(u for u in self.listening
                                    if u.startswith("tcp://127.0.0.1:"))
                    return
                if not chunk:   # closed unsaid: pvgpud is failing
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
            if self.proc.poll() is not None:
                pytest.fail(f"pvgpud exited with {self.proc.returncode} while "
                            f"starting:\n{tail(self.log())}")
        self.proc.kill()
        self.proc.wait()
        pytest.fail(f"pvgpud did not say it was ready within "
                    f"{START_TIMEOUT:.0f} s:\n{tail(self.log())}")

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, pattern, timeout=30):
        """The log once it has a line matching regex pattern: a session's
        end line comes after its client has gone, later on a busy machine.
        Fails, with the log's tail, after timeout seconds without one."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log()
            if re.search(pattern, text, re.M):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"pvgpud logged no line matching {pattern!r} in "
                            f"{timeout} s:\n{text[-3000:]}")
            time.sleep(0.1)

    def stop(self):
        """SIGTERM, and the exit code; None if pvgpud had to be killed
        because it did not exit within STOP_TIMEOUT."""
        if self.proc is None:
            return 0
        try:
            if self.proc.poll() is not None:
                return self.proc.returncode  # died before teardown
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        finally:
            self._log_file.close()

    def env(self, uri):
        """Environment for a program that reaches this daemon at uri."""
        return pvgpu_env(uri)


def base_env():
    env = dict(os.environ)
    # Never let a caller's settings leak into a run.
    for var in ("PVGPU_DEVICES", "PVGPU_TOKEN"):
        env.pop(var, None)
    return env


def with_libdir(env, libdir):
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(libdir) + (":" + old if old else "")
    return env


def nvidia_cudart():
    """NVIDIA's libcudart.so.13 (scripts/find-cuda.sh --libdir).  Missing,
    the test fails rather than skips: a machine without it would pass
    having run no program at all (`make deps` installs it)."""
    found = subprocess.run(["scripts/find-cuda.sh", "--libdir"], cwd=REPO,
                           capture_output=True, text=True)
    lib = Path(found.stdout.strip()) / "libcudart.so.13"
    if found.returncode or not lib.exists():
        pytest.fail("NVIDIA's libcudart.so.13 is not installed "
                    "(scripts/find-cuda.sh --libdir; run `make deps`)")
    return lib.resolve()


_guest_libdir = []


def guest_libdir():
    """A folder holding NVIDIA's libcudart.so.13 and pvgpu's libcuda.so.1,
    nothing else (not BUILD/lib, whose other libraries a test may want
    out of the way): on LD_LIBRARY_PATH, a program built -cudart shared
    loads NVIDIA's runtime over pvgpu's driver.  One per
    test process, removed at its end."""
    if not _guest_libdir:
        if not LIBCUDA.exists():
            pytest.fail(f"{LIBCUDA} is not built (run `make`)")
        d = Path(tempfile.mkdtemp(prefix="pvgpu-cu-"))
        os.symlink(nvidia_cudart(), d / "libcudart.so.13")
        os.symlink(LIBCUDA.resolve(), d / "libcuda.so.1")
        _guest_libdir.append(d)
    return _guest_libdir[0]


def pytest_sessionfinish(session):
    for d in _guest_libdir:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def libdir():
    """guest_libdir(), for tests that build a guest's environment
    themselves (tests/lib/pvgpu_guest.py's guest_env)."""
    return guest_libdir()


_sanitizer_runtime = []


def sanitizer_runtime():
    """The ASan runtime pvgpu's libcuda.so.1 was linked with, if it was
    (the sanitizer build), else None."""
    if not _sanitizer_runtime:
        _sanitizer_runtime.append(asan_runtime(LIBCUDA) if LIBCUDA.exists() else None)
    return _sanitizer_runtime[0]


def pvgpu_env(uri):
    """Run through pvgpu: NVIDIA's runtime over pvgpu's libcuda.so.1 (the
    folder above, alone on LD_LIBRARY_PATH), talking to pvgpud at uri.  In
    the sanitizer build ASan's runtime comes first, and its leak check
    stays on for pvgpu's code (pvgpu_asan.preload_for)."""
    env = base_env()
    env["LD_LIBRARY_PATH"] = str(guest_libdir())
    preload_for(LIBCUDA, env, leaks=True)
    env["PVGPU_DEVICES"] = uri
    if uri.startswith("tcp://"):
        env["PVGPU_TOKEN"] = TCP_TOKEN
    return env


def native_env(libdir):
    """Run against NVIDIA's own libcudart.so.13 in libdir."""
    return with_libdir(base_env(), libdir)


def run_program(name, env, timeout=PROGRAM_TIMEOUT):
    return subprocess.run(
        [str(program_path(name))], env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, errors="replace", timeout=timeout,
        cwd=REPO)


def describe(res, daemon=None):
    """Everything needed to understand a failed run."""
    parts = [f"exit code: {res.returncode}",
             f"--- stdout (tail) ---\n{tail(res.stdout)}",
             f"--- stderr (tail) ---\n{tail(res.stderr)}"]
    if daemon is not None:
        parts.append(f"--- pvgpud log (tail) ---\n{tail(daemon.log())}")
    return "\n".join(parts)


def assert_passed(res, daemon=None):
    assert res.returncode >= 0, \
        f"killed by signal {-res.returncode}\n{describe(res, daemon)}"
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and lines and lines[-1] == "PASS", \
        describe(res, daemon)
    found = sanitizer_report(res.stderr)
    assert found is None, f"sanitizer report ({found})\n{describe(res, daemon)}"


# make test runs these folders once, against the sanitizer build (its
# "sanitizer" pass: -m sanitized); the plain pass leaves them out but for
# what only the plain build can run (-m "not sanitized or plain_build").
# A plain `pytest` runs everything.
SANITIZED_FOLDERS = ("unit", "integration", "hostile")


def pytest_collection_modifyitems(config, items):
    sanitized_build = sanitizer_runtime() is not None
    for item in items:
        try:
            folder = Path(str(item.fspath)).relative_to(REPO / "tests").parts[0]
        except ValueError:
            continue
        if folder in SANITIZED_FOLDERS:
            item.add_marker(pytest.mark.sanitized)
        plain = item.get_closest_marker("plain_build")
        if plain and sanitized_build:
            item.add_marker(pytest.mark.skip(reason=plain.args[0]))


def pytest_generate_tests(metafunc):
    # A test that takes `program` runs once per test program.
    if "program" in metafunc.fixturenames:
        metafunc.parametrize("program", PROGRAMS)


# Huge pages, as an administrator reserves them (reserved_hugepages below).
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def free_hugepages():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("HugePages_Free:"):
                return int(line.split()[1])
    return 0


class Programs:
    """The helpers above, for test modules: they reach them through the
    `programs` fixture rather than `import conftest`, which becomes
    ambiguous as soon as another directory has a conftest.py of its own."""

    names = PROGRAMS
    timeout = PROGRAM_TIMEOUT
    path = staticmethod(program_path)
    run = staticmethod(run_program)
    pvgpu_env = staticmethod(pvgpu_env)
    libdir = staticmethod(guest_libdir)
    native_env = staticmethod(native_env)
    describe = staticmethod(describe)
    assert_passed = staticmethod(assert_passed)
    free_tcp_port = staticmethod(free_tcp_port)
    free_hugepages = staticmethod(free_hugepages)
    repo = REPO


@pytest.fixture(scope="session")
def programs():
    return Programs()


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path, for Unix sockets: their
    paths are limited to 107 bytes, and pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="pvgpu-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pvgpud_factory():
    daemons = []
    workdirs = []  # short paths, as for short_tmp

    def start(executor="sim", extra_args=(), env=None):
        workdir = Path(tempfile.mkdtemp(prefix="pvgpu-"))
        workdirs.append(workdir)
        daemon = Daemon(executor, workdir, extra_args, env)
        daemons.append(daemon)
        daemon.start()
        return daemon

    yield start

    problems = []
    for daemon in daemons:
        code = daemon.stop()
        log = daemon.log()
        if code is None:
            problems.append(f"pvgpud did not exit within {STOP_TIMEOUT:.0f} s "
                            f"of SIGTERM:\n{tail(log)}")
        elif code != 0:
            problems.append(f"pvgpud exited with {code} after SIGTERM, "
                            f"expected 0:\n{tail(log)}")
        found = sanitizer_report(log)
        if found:
            problems.append(f"sanitizer report in the pvgpud log "
                            f"({found}):\n{tail(log, 200)}")
    for workdir in workdirs:
        shutil.rmtree(workdir, ignore_errors=True)
    if problems:
        pytest.fail("\n\n".join(problems))


@pytest.fixture
def start_pvgpud():
    """Factory: start_pvgpud(executor, extra_args=(), env=None) -> a running
    Daemon; env adds variables to pvgpud's environment (PVGPU_SIM_TWINS, say).
    Every daemon started is stopped at teardown, which checks that it exits 0 within 10 s
    of SIGTERM (DESIGN §8) and that its log holds no sanitizer report."""
    yield from _pvgpud_factory()


@pytest.fixture(scope="module")
def start_pvgpud_module():
    """start_pvgpud for a module-scoped fixture (guests booted once for
    several tests): the same checks, at the module's end."""
    yield from _pvgpud_factory()


@pytest.fixture
def sim_daemon(start_pvgpud):
    """pvgpud --executor sim, listening on unix and tcp."""
    return start_pvgpud("sim")


@pytest.fixture
def twins_daemon(start_pvgpud):
    """pvgpud --executor sim with the test programs' CPU twins, so that
    their kernels run."""
    twins = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
    if not twins.exists():
        pytest.fail(f"{twins} is not built (run `make test-programs`)")
    return start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(twins)})


@pytest.fixture
def bench_daemon(start_pvgpud):
    """pvgpud --executor sim with CPU twins of the benchmarks' kernels."""
    return start_pvgpud("sim", env={
        "PVGPU_SIM_TWINS": str(BUILD / "tests" / "sim-twins" / "libbench-twins.so")})


@pytest.fixture
def reserved_hugepages():
    """64 more 2 MiB pages for one test (a 128 MiB window); skips, saying
    why, where they cannot be had (not root, no memory)."""
    try:
        with open(NR_HUGEPAGES) as f:
            old = int(f.read())
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(old + 64))
    except OSError as e:
        pytest.skip(f"cannot reserve huge pages here ({e})")
    try:
        if free_hugepages() < 64:
            pytest.skip("the kernel found no memory for 64 huge pages")
        yield 64
    finally:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(old))
