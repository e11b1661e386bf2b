"""Observability: `pvgpud --metrics ADDR:PORT` serves per-GPU and per-VM
figures in the Prometheus text format, and `pvgpuctl status` shows the same
figures as a table.

VMs come from a policy file (as in test_policy.py); sessions speak the wire
protocol directly (tests/lib/pvgpu_wire.py), so every call and byte the
figures should count is known here exactly.
"""
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import tcp_session, unix_session, wait_live  # noqa: E402
from fake_metrics import FakeMetrics  # noqa: E402
from ports import free_tcp_port  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10
BOB_TOKEN = "bob-token-51c2"
CAROL_TOKEN = "carol-token-9e0d"

# Never through a proxy from the environment: the endpoint is on loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def three_vms():
    return f"""
        [default]
        policy = refuse

        [vm alice]
        uid = {os.getuid()}
        memory = 8M
        max_sessions = 4

        [vm bob]
        token = {BOB_TOKEN}
        memory = 16M

        [vm carol]
        token = {CAROL_TOKEN}
        memory = 4M
        """


def metrics_daemon(start_pvgpud, tmp_path, policy=None):
    args = []
    if policy is not None:
        path = tmp_path / "pvgpud.conf"
        path.write_text(textwrap.dedent(policy))
        args += ["--config", str(path)]
    addr = f"127.0.0.1:{free_tcp_port()}"
    daemon = start_pvgpud("sim", extra_args=args + ["--metrics", addr])
    daemon.metrics = addr
    daemon.url = f"http://{addr}/metrics"
    return daemon


def get(url):
    with OPENER.open(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def parse(text):
    """{(name, frozenset(labels.items())): value}, checking that every
    family has its HELP and TYPE lines before its samples."""
    out, helped, typed = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            typed[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        assert name in helped and name in typed, f"{name} has no HELP/TYPE"
        labels = dict(LABEL.findall(labels or ""))
        out[(name, frozenset(labels.items()))] = float(value)
    return out


def scrape(daemon):
    # The server starts just after the session listeners the fixture
    # waited for; give it the moment it may need.
    deadline = time.monotonic() + 5
    while True:
        try:
            status, ctype, text = get(daemon.url)
            break
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    return parse(text)


def val(m, metric, **labels):
    key = (metric, frozenset(labels.items()))
    assert key in m, f"no {metric}{labels} in the metrics"
    return m[key]


def wait_for(daemon, pred, what, timeout=10.0):
    """Scrape until pred(metrics) holds: counters of live sessions are
    sampled once a second, so a figure may lag what was just done."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(daemon)
        if pred(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; last:\n"
                                 + "\n".join(f"{k[0]}{dict(k[1])} {v}"
                                             for k, v in sorted(m.items(), key=str)))
        time.sleep(0.1)






def alloc(s, size):
    st, _, out, _ = s.call("mem_alloc", size=size)
    assert st == 0, st
    return out["dptr"]


def htod(s, ptr, payload):
    assert s.call("memcpy_htod", data_in=payload, dst=ptr, size=len(payload),
                  stream=0)[0] == 0


def dtoh(s, ptr, size):
    st, _, _, data = s.call("memcpy_dtoh", src=ptr, size=size, stream=0)
    assert st == 0 and len(data) == size
    return data


def messages(*sessions):
    """Messages the sessions sent: each is one call for pvgpud."""
    return sum(s.next_id - 1 for s in sessions)


def counters(m, vm):
    return (val(m, "pvgpu_vm_calls_total", vm=vm),
            val(m, "pvgpu_vm_bytes_total", vm=vm, direction="h2d"),
            val(m, "pvgpu_vm_bytes_total", vm=vm, direction="d2h"),
            val(m, "pvgpu_vm_gpu_time_seconds_total", vm=vm))


def test_per_vm_figures_and_counters_that_outlive_sessions(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    a1, a2 = unix_session(daemon), unix_session(daemon)
    b = tcp_session(daemon, BOB_TOKEN)
    p1 = alloc(a1, 3 * MiB)
    alloc(a2, 1 * MiB)
    pb = alloc(b, 5 * MiB)
    payload = bytes(range(256)) * (4 * KiB)   # 1 MiB
    htod(a1, p1, payload)
    assert dtoh(a1, p1, 256 * KiB) == payload[:256 * KiB]
    for _ in range(3):
        htod(b, pb, payload[:64 * KiB])

    alice_calls = messages(a1, a2)
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_calls_total", vm="alice") == alice_calls
                 and val(m, "pvgpu_vm_bytes_total", vm="bob", direction="h2d") == 192 * KiB,
                 "alice's calls and bob's bytes")
    # Sessions, memory and quota per VM; carol has none of hers.
    assert val(m, "pvgpu_vm_sessions", vm="alice") == 2
    assert val(m, "pvgpu_vm_sessions", vm="bob") == 1
    assert val(m, "pvgpu_vm_sessions", vm="carol") == 0
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="alice") == 4 * MiB
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="bob") == 5 * MiB
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="carol") == 0
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="alice") == 8 * MiB
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="bob") == 16 * MiB
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="carol") == 4 * MiB
    # Exactly the bytes each VM copied, each way.
    assert val(m, "pvgpu_vm_bytes_total", vm="alice", direction="h2d") == 1 * MiB
    assert val(m, "pvgpu_vm_bytes_total", vm="alice", direction="d2h") == 256 * KiB
    assert val(m, "pvgpu_vm_bytes_total", vm="bob", direction="d2h") == 0
    assert counters(m, "carol") == (0, 0, 0, 0)
    # bob's hello may be counted before his token named him: it is then
    # with the sessions of no VM, and nowhere else.
    bob_calls = val(m, "pvgpu_vm_calls_total", vm="bob")
    assert messages(b) - 1 <= bob_calls <= messages(b)
    assert bob_calls + m.get(("pvgpu_vm_calls_total", frozenset({("vm", "-")})), 0) \
        == messages(b)
    # Only the policy's VMs: its unknown callers are refused, so no pool.
    assert {dict(k[1])["vm"] for k in m if k[0] == "pvgpu_vm_sessions"} <= \
        {"alice", "bob", "carol", "-"}
    # The device: three sessions with a context on it, 9 MiB in use.
    assert val(m, "pvgpu_gpu_info", gpu="0", name="pvgpu simulated device") == 1
    assert val(m, "pvgpu_gpu_sessions", gpu="0") == 3
    assert val(m, "pvgpu_gpu_memory_used_bytes", gpu="0") == 9 * MiB
    assert val(m, "pvgpu_gpu_memory_total_bytes", gpu="0") >= 9 * MiB

    before = {vm: counters(m, vm) for vm in ("alice", "bob")}
    for s in (a1, a2, b):
        s.close()
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_sessions", vm="alice") == 0
                 and val(m, "pvgpu_vm_sessions", vm="bob") == 0,
                 "the sessions to end")
    # Ended sessions give back their memory, not what they counted.
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="alice") == 0
    assert val(m, "pvgpu_gpu_memory_used_bytes", gpu="0") == 0
    assert val(m, "pvgpu_gpu_sessions", gpu="0") == 0
    for vm, c in before.items():
        assert counters(m, vm) == c, vm

    # A new session adds to what the ended ones did.
    a3 = unix_session(daemon)
    p3 = alloc(a3, 1 * MiB)
    htod(a3, p3, payload[:100 * KiB])
    want = before["alice"][0] + messages(a3)
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_calls_total", vm="alice") == want,
                 "alice's new calls")
    assert val(m, "pvgpu_vm_bytes_total", vm="alice", direction="h2d") == 1 * MiB + 100 * KiB
    assert val(m, "pvgpu_vm_sessions", vm="alice") == 1
    a3.close()


def test_rates_follow_the_load(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    a = unix_session(daemon)
    b = tcp_session(daemon, BOB_TOKEN)          # idle throughout
    pa = alloc(a, 1 * MiB)
    chunk = b"\x5a" * (256 * KiB)
    copied = 0
    end = time.monotonic() + 2.5                # more than two sampling intervals
    while time.monotonic() < end:
        htod(a, pa, chunk)
        copied += len(chunk)
    m = scrape(daemon)
    interval = val(m, "pvgpu_sampling_interval_seconds")
    assert 0.5 <= interval <= 2.0, interval
    calls_rate = val(m, "pvgpu_vm_calls_per_second", vm="alice")
    h2d_rate = val(m, "pvgpu_vm_bytes_per_second", vm="alice", direction="h2d")
    # The last interval lay inside the copying: busy, but not busier than
    # everything alice ever did.
    assert 0 < calls_rate * interval <= messages(a)
    assert 0 < h2d_rate * interval <= copied
    assert val(m, "pvgpu_vm_bytes_per_second", vm="alice", direction="d2h") == 0
    assert val(m, "pvgpu_vm_calls_per_second", vm="bob") == 0
    assert val(m, "pvgpu_vm_bytes_per_second", vm="bob", direction="h2d") == 0
    # The sim executor measures no GPU time: no share is made up.
    shares = [v for (n, _), v in m.items() if n == "pvgpu_vm_gpu_time_share"]
    assert shares and (all(math.isnan(s) for s in shares)
                       or abs(sum(shares) - 1) < 1e-6), shares
    a.close()
    b.close()
    # Idle again: the next intervals see nothing.
    wait_for(daemon, lambda m: val(m, "pvgpu_vm_calls_per_second", vm="alice") == 0
             and val(m, "pvgpu_vm_bytes_per_second", vm="alice", direction="h2d") == 0,
             "alice's rates to fall to 0")


def pvgpuctl(*args):
    return subprocess.run([str(daemon_bin("pvgpuctl")), *args], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


def daemon_bin(name):
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    return repo / os.environ.get("PVGPU_BUILD", "build") / "bin" / name


def row(out, first):
    for line in out.splitlines():
        if line.split() and line.split()[0] == first:
            return line
    raise AssertionError(f"no row {first!r} in:\n{out}")


def test_pvgpuctl_status_shows_the_figures(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    a1, a2 = unix_session(daemon), unix_session(daemon)
    b = tcp_session(daemon, BOB_TOKEN)
    alloc(a1, 3 * MiB)
    alloc(a2, 512 * KiB)
    pb = alloc(b, 5 * MiB)
    # bob copies without pause while status looks, so his rates show.
    stop = threading.Event()

    def load():
        while not stop.is_set():
            htod(b, pb, b"\x01" * (512 * KiB))
    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(2.2)
        res = pvgpuctl("status", "--metrics", daemon.metrics)
    finally:
        stop.set()
        t.join()
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert re.search(r"^0\s+pvgpu simulated device\s+3\s+8\.5 MiB of ", out, re.M), out
    assert re.search(r"^alice\s+2\s+3\.5 MiB / 8\.0 MiB\s+0\.0\s+0\.00\s+0\.00\s+-$",
                     row(out, "alice")), out
    assert re.search(r"^carol\s+0\s+0 B / 4\.0 MiB\s+0\.0\s+0\.00\s+0\.00\s+-$",
                     row(out, "carol")), out
    cols = row(out, "bob").split()
    # bob  1  5.0 MiB / 16.0 MiB  CALLS/S  MB/S H2D  MB/S D2H  GPU TIME
    assert cols[:7] == ["bob", "1", "5.0", "MiB", "/", "16.0", "MiB"], out
    assert float(cols[7]) > 0 and float(cols[8]) > 0 and float(cols[9]) == 0, out
    assert cols[10] == "-", out

    # The same, given as a URL or as the bare address.
    for where in (daemon.url, f"http://{daemon.metrics}", daemon.metrics):
        res = pvgpuctl("status", where)
        assert res.returncode == 0, (where, res.stderr)
        assert re.search(r"^alice\s+2\s+3\.5 MiB / 8\.0 MiB", row(res.stdout, "alice"))
    for s in (a1, a2, b):
        s.close()


def test_pvgpuctl_status_without_a_server(tmp_path):
    res = pvgpuctl("status", f"127.0.0.1:{free_tcp_port()}")
    assert res.returncode == 1
    assert "cannot read http://127.0.0.1:" in res.stderr and "--metrics" in res.stderr
    res = pvgpuctl("status", "--bogus")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


def test_pvgpuctl_status_reads_what_it_is_given():
    # The VM is named  we\ird "vm"  and its label escaped accordingly.
    text = textwrap.dedent(r"""
        # HELP pvgpu_vm_sessions x
        # TYPE pvgpu_vm_sessions gauge
        pvgpu_vm_sessions{vm="we\\ird \"vm\""} 3
        pvgpu_vm_memory_used_bytes{vm="we\\ird \"vm\""} 1572864
        pvgpu_vm_memory_quota_bytes{vm="we\\ird \"vm\""} 0
        pvgpu_vm_calls_per_second{vm="we\\ird \"vm\""} 250.5 1700000000000
        pvgpu_vm_bytes_per_second{vm="we\\ird \"vm\"",direction="h2d"} 2500000
        pvgpu_vm_bytes_per_second{vm="we\\ird \"vm\"",direction="d2h"} 1000000
        pvgpu_vm_gpu_time_share{vm="we\\ird \"vm\""} 0.25
        pvgpu_vm_gpu_time_share{vm="other"} NaN
        not a sample line at all
        pvgpu_sampling_interval_seconds 1.000
        """)
    with FakeMetrics(text) as srv:
        res = pvgpuctl("status", srv.addr)
    assert res.returncode == 0, res.stderr
    line = row(res.stdout, 'we\\ird')
    assert re.match(r'^we\\ird "vm"\s+3\s+1\.5 MiB / none\s+250\.5\s+2\.50\s+1\.00\s+25\.0%$',
                    line), res.stdout
    assert re.match(r"^other\s+0\s+0 B / none\s+0\.0\s+0\.00\s+0\.00\s+-$",
                    row(res.stdout, "other")), res.stdout
    # Not pvgpud's figures, or no figures: said, and exit 1.
    with FakeMetrics("hello\n") as srv:
        res = pvgpuctl("status", srv.addr)
    assert res.returncode == 1 and "holds no pvgpud figures" in res.stderr, res
    with FakeMetrics("gone\n", code=500) as srv:
        res = pvgpuctl("status", srv.addr)
    assert res.returncode == 1 and "cannot read" in res.stderr and "500" in res.stderr, res


def test_sessions_without_a_policy_are_vm_dash(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path)
    s = unix_session(daemon)
    alloc(s, 2 * MiB)
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_calls_total", vm="-") == messages(s),
                 "the calls of the session")
    assert val(m, "pvgpu_vm_sessions", vm="-") == 1
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="-") == 2 * MiB
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="-") == 0
    assert not [k for k in m if k[0] == "pvgpu_vm_sessions" and dict(k[1])["vm"] != "-"]
    s.close()


def test_allowed_unknown_callers_are_the_default_pool(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, f"""
        [default]
        policy = allow
        memory = 2M

        [vm someone-else]
        uid = {os.getuid() + 1}
        """)
    s = unix_session(daemon)
    alloc(s, 1 * MiB)
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_calls_total", vm="default") == messages(s),
                 "the calls of the session")
    assert val(m, "pvgpu_vm_sessions", vm="default") == 1
    assert val(m, "pvgpu_vm_memory_used_bytes", vm="default") == 1 * MiB
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="default") == 2 * MiB
    assert val(m, "pvgpu_vm_sessions", vm="someone-else") == 0
    s.close()


def listen_inode(port):
    """The inode of the socket listening on 127.0.0.1:port."""
    want = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1] == want and cols[3] == "0A":   # LISTEN
                return cols[9]
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("socket:["):
            out.add(link[len("socket:["):-1])
    return out


def test_workers_do_not_hold_the_metrics_socket(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    inode = listen_inode(int(daemon.metrics.rsplit(":", 1)[1]))
    assert inode in socket_inodes(daemon.proc.pid)
    # Scrapes in flight while workers fork must not leak into them either.
    stop = threading.Event()

    def scraper():
        while not stop.is_set():
            scrape(daemon)
    threads = [threading.Thread(target=scraper) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            seen = len(re.findall(r"\(worker pid \d+\)", daemon.log()))
            sessions = [unix_session(daemon) for _ in range(4)]  # alice's max
            # The supervisor logs a start after the fork: the worker may
            # have answered hello before that line is out.
            deadline = time.monotonic() + 5
            while True:
                workers = [int(p) for p in
                           re.findall(r"\(worker pid (\d+)\)", daemon.log())[seen:]]
                if len(workers) == 4 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert len(workers) == 4, daemon.log()
            for pid in workers:
                held = socket_inodes(pid)
                assert inode not in held, f"worker {pid} holds the metrics socket"
                # Its own session's socket and its end of the channel a
                # resumed connection would come through, nothing else.
                assert len(held) == 2, (pid, held)
            for s in sessions:
                s.close()
            wait_for(daemon, lambda m: val(m, "pvgpu_vm_sessions", vm="alice") == 0,
                     "the sessions to end")
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_a_reload_shows_new_quotas_and_keeps_counters(start_pvgpud, tmp_path):
    import signal
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    a = unix_session(daemon)
    htod(a, alloc(a, 1 * MiB), b"\x07" * (64 * KiB))
    a.close()
    m = wait_for(daemon, lambda m: val(m, "pvgpu_vm_sessions", vm="alice") == 0
                 and val(m, "pvgpu_vm_bytes_total", vm="alice", direction="h2d") == 64 * KiB,
                 "alice's session to end")
    calls = val(m, "pvgpu_vm_calls_total", vm="alice")
    # alice leaves the policy, carol's quota grows, dave arrives.
    (tmp_path / "pvgpud.conf").write_text(textwrap.dedent(f"""
        [vm carol]
        token = {CAROL_TOKEN}
        memory = 6M

        [vm dave]
        token = dave-token
        """))
    daemon.proc.send_signal(signal.SIGHUP)
    m = wait_for(daemon, lambda m: ("pvgpu_vm_sessions", frozenset({("vm", "dave")})) in m,
                 "the reloaded policy")
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="carol") == 6 * MiB
    assert val(m, "pvgpu_vm_memory_quota_bytes", vm="dave") == 0
    # alice's counters stay: a counter does not vanish with its VM's section.
    assert val(m, "pvgpu_vm_calls_total", vm="alice") == calls
    assert val(m, "pvgpu_vm_bytes_total", vm="alice", direction="h2d") == 64 * KiB
    # bob did nothing and is gone from the file: he is no longer listed.
    assert ("pvgpu_vm_sessions", frozenset({("vm", "bob")})) not in m


def test_only_metrics_is_served(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    base = f"http://{daemon.metrics}"
    for path in ("/", "/metricsx", "/status"):
        try:
            get(base + path)
            raise AssertionError(f"{path} answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404, (path, e.code)
    req = urllib.request.Request(base + "/metrics", data=b"x", method="POST")
    try:
        OPENER.open(req, timeout=10)
        raise AssertionError("POST answered")
    except urllib.error.HTTPError as e:
        assert e.code == 405


def run_pvgpud(tmp_path, *args):
    return subprocess.run(
        [str(daemon_bin("pvgpud")), "--listen", f"unix://{tmp_path}/s.sock",
         "--executor", "sim", "--module-cache", str(tmp_path / "m"), *args],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_metrics_on_a_non_loopback_address_is_refused(tmp_path):
    for addr in ("0.0.0.0:9400", "[::]:9400", "192.0.2.1:9400"):
        res = run_pvgpud(tmp_path, "--metrics", addr)
        assert res.returncode == 2, (addr, res)
        assert res.stderr.count("\n") == 1, res.stderr
        assert "not a loopback address" in res.stderr, res.stderr
    for addr in ("9400", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:http", "[::1]"):
        res = run_pvgpud(tmp_path, "--metrics", addr)
        assert res.returncode == 2, (addr, res)
        assert "--metrics" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_metrics_port_in_use(start_pvgpud, tmp_path):
    daemon = metrics_daemon(start_pvgpud, tmp_path, three_vms())
    res = run_pvgpud(tmp_path, "--metrics", daemon.metrics)
    assert res.returncode == 1, res
    assert f"--metrics {daemon.metrics}: cannot serve there" in res.stderr, res.stderr


def test_debug_log_counts_the_highest_opcode(start_pvgpud):
    """At a session's end pvgpud's debug log names the requests the guest
    waited for most; its counters reach every opcode ops.spec declares, the
    highest too (the bound comes from the generated PVGPU_OP_MAX)."""
    d = start_pvgpud("sim")
    sync = [op for op, v in W.P.OPS.items() if v[1] == "sync"]
    top = max(sync, key=lambda op: W.P.OPS[op][0])
    s = unix_session(d)
    for _ in range(5):
        s.call(top)              # refused or not, every request is counted
    s.close()
    wait_live(d, 0)
    lines = [line for line in d.log().splitlines() if "requests waited for most:" in line]
    assert lines and f" {top}\u00d75" in lines[-1], lines
