"""pvgpud's workers seen from outside, for tests that stop, continue and
count them: which VM each belongs to (from the session start lines of
pvgpud's log), whether it is alive, whether it stopped in its own code,
and the zombies and live sessions a supervisor has not yet reaped."""
import os
import random
import re
import signal
import time

from idle import children

START = re.compile(r"session (\d+) start: .* via \S+, vm ([\w.-]+) \(worker pid (\d+)\)")
KILLED = re.compile(r": (worker pid (\d+) \(session (\d+), vm (\w+)\)) has held it "
                    r"[\d.]+ s, past the [\d.]+ s bound on a shared lock; killed it$", re.M)


class Workers:
    """pvgpud's workers by VM, read from its session start lines."""

    def __init__(self, daemon):
        self.daemon, self.offset, self.vm = daemon, 0, {}

    def refresh(self):
        with open(self.daemon.log_path, "rb") as f:
            f.seek(self.offset)
            text = f.read()
        end = text.rfind(b"\n") + 1
        self.offset += end
        for m in START.finditer(text[:end].decode(errors="replace")):
            self.vm[int(m[3])] = m[2]

    def alive(self, pid):
        """Still pvgpud's child, and not yet dead."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return False
        return int(fields[1]) == self.daemon.proc.pid and fields[0] not in "ZX"

    def of(self, vm):
        """Its workers alive now; the dead are forgotten."""
        for pid in [p for p in self.vm if not self.alive(p)]:
            del self.vm[pid]
        return [p for p, v in self.vm.items() if v == vm]


def in_own_code(pid, wait_s=0.05):
    """Whether pid, just sent SIGSTOP, stopped running its own code rather
    than waiting in a system call (where a debugger's breakpoint stops a
    process, and where it holds its locks).  False when /proc does not say."""
    deadline = time.monotonic() + wait_s
    try:
        while True:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            if time.monotonic() > deadline:
                return False
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == "-1"
    except (OSError, IndexError):
        return False


def signal_if_alive(workers, pid, sig):
    if workers.alive(pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def zombies(pid):
    found = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    found.append(child)
        except OSError:
            pass
    return found


def live_in_log(log):
    return len(re.findall(r" info: session \d+ start: ", log)) - \
        len(re.findall(r" info: session \d+ end: ", log))


class _Daemon:
    """What Workers needs of a started pvgpud, in another process."""

    def __init__(self, log_path, pid):
        self.log_path, self.pid = log_path, pid
        self.proc = self


def stop_at_random(log_path, pid, seed, vms, done, short_s=0.004, long_s=(2.5, 4.0),
                   long_share=0.03, forever_max=3, forever_share=0.05, pause_s=0.002,
                   own_code=True):
    """SIGSTOP the workers of vms (names) at random, one after another,
    until done() says so: most for up to short_s, long_share of them for
    long_s (past the bound on a shared lock), and up to forever_max of
    those caught in their own code (any, unless own_code) for good, pausing pause_s after each
    short stop.  Returns (stops, the pids
    left stopped for good); the others are continued."""
    rng = random.Random(seed)
    workers = Workers(_Daemon(log_path, pid))
    stops, resume, forever = 0, {}, []
    next_look, mine = 0.0, []
    while not done():
        now = time.monotonic()
        for p in [p for p, at in resume.items() if at <= now]:
            signal_if_alive(workers, p, signal.SIGCONT)
            del resume[p]
        if now >= next_look:
            workers.refresh()
            mine = [p for vm in vms for p in workers.of(vm)
                    if p not in resume and p not in forever]
            next_look = now + 0.05
        if not mine:
            time.sleep(0.005)
            continue
        p = rng.choice(mine)
        signal_if_alive(workers, p, signal.SIGSTOP)
        stops += 1
        r = rng.random()
        if r < forever_share and len(forever) < forever_max and \
                (in_own_code(p) or not own_code):
            forever.append(p)
        elif r < long_share:
            resume[p] = now + rng.uniform(*long_s)
        else:
            time.sleep(rng.uniform(0, short_s))
            signal_if_alive(workers, p, signal.SIGCONT)
            time.sleep(pause_s)     # a rest between stops, if asked
            continue
        mine.remove(p)
    for p in resume:
        signal_if_alive(workers, p, signal.SIGCONT)
    return stops, forever


if __name__ == "__main__":
    # workers.py LOG PID SEED VM...: stop_at_random() in a process of its
    # own (a test's many threads would starve it of Python's lock) until
    # stdin closes; then one line of JSON: {"stops": N, "forever": [PID]}.
    # Workers idle in a system call are left stopped for good too: a soak
    # is long, and catching one in its own code is rare.
    import json
    import sys
    import threading
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    stops, forever = stop_at_random(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                    sys.argv[4:], closed.is_set, own_code=False)
    print(json.dumps({"stops": stops, "forever": forever}), flush=True)
