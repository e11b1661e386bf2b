"""The module cache is per VM and bounded (DESIGN §5).

pvgpud keeps every module image a guest uploads under its SHA-256 in
--module-cache, so that a later session can name it by hash
(module_lookup) instead of uploading it again.  A VM finds only images it
uploaded itself; its images take at most its policy's module_cache bytes
(the least recently used go first), and the whole cache at most
--module-cache-max.  Raw protocol calls, as a guest's module loads make
them; the images are PTX text the sim executor loads.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import alice_and_bob, tcp_session, unix_session, wait_live  # noqa: E402
from pvgpud_cli import assert_refused, assert_vm_key_refused, run_pvgpud  # noqa: E402

from curesult import CUDA_ERROR_NOT_FOUND  # noqa: E402
MiB = 1 << 20
BOB_TOKEN = "bob-modcache-3f1c"


def image(tag, size=MiB):
    """A PTX module of exactly size bytes, its text told apart by tag."""
    head = (".version 9.0\n.target sm_90\n.address_size 64\n"
            f"// image {tag}\n").encode()
    body = b".visible .entry pvgpu_cache_probe()\n{\n\tret;\n}\n"
    pad = size - len(head) - len(body)
    lines = b"".join(b"// " + b"x" * 1020 + b"\n" for _ in range(pad // 1024))
    rest = pad - len(lines)
    lines += (b"//" + b"x" * (rest - 3) + b"\n") if rest >= 3 else b"\n" * rest
    blob = head + lines + body
    assert len(blob) == size
    return blob


def load(s, blob):
    """Upload blob as a module, then unload it: the upload's status."""
    st, _d, out, _ = s.call("module_load", data_in=blob, size=len(blob))
    if st == 0:
        assert s.call("module_unload", module=out["module"])[0] == 0
    return st


def lookup(s, blob):
    """module_lookup of blob's hash (a module it finds is unloaded again)."""
    st, _d, out, _ = s.call("module_lookup", hash=hashlib.sha256(blob).digest())
    if st == 0:
        assert s.call("module_unload", module=out["module"])[0] == 0
    return st


def cache_bytes(daemon):
    """What the files under the cache directory hold, whatever its layout."""
    total = 0
    for root, _dirs, files in os.walk(daemon.workdir / "modules"):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def test_load_unload_cycles_stay_within_the_vms_bound(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN,
                           "module_cache = 4M\nmemory = 64M")
    wait_live(daemon)
    alice = unix_session(daemon)
    blobs = [image(f"cycle {i}") for i in range(16)]
    for blob in blobs:
        assert load(alice, blob) == 0
        assert cache_bytes(daemon) <= 4 * MiB
    # The newest images are what is kept; the oldest went first.
    assert lookup(alice, blobs[-1]) == 0
    assert lookup(alice, blobs[0]) == CUDA_ERROR_NOT_FOUND
    # The cache is disk, not device memory: the quota is all free again.
    st, _d, out, _ = alice.call("mem_get_info")
    assert st == 0 and out["free"] == out["total"] == 64 * MiB, (st, out)
    # An image larger than the bound loads, and is not kept.
    big = image("big", 5 * MiB)
    assert load(alice, big) == 0
    assert lookup(alice, big) == CUDA_ERROR_NOT_FOUND
    assert cache_bytes(daemon) <= 4 * MiB
    alice.close()


def test_a_vm_finds_only_images_it_uploaded(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN)
    wait_live(daemon)
    alice, bob = unix_session(daemon), tcp_session(daemon, BOB_TOKEN)
    secret = image("only alice has this", 64 * 1024)
    assert load(alice, secret) == 0
    # Another session of alice's finds it ...
    alice2 = unix_session(daemon)
    assert lookup(alice2, secret) == 0
    # ... bob does not learn that anyone loaded it, and must upload it.
    assert lookup(bob, secret) == CUDA_ERROR_NOT_FOUND
    assert load(bob, secret) == 0
    assert lookup(bob, secret) == 0
    for s in (alice, alice2, bob):
        s.close()


def test_the_whole_cache_stays_within_its_bound(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN,
                           "module_cache = 4M",
                           extra_args=("--module-cache-max", "6M"))
    wait_live(daemon)
    alice, bob = unix_session(daemon), tcp_session(daemon, BOB_TOKEN)
    for i in range(8):
        for name, s in (("alice", alice), ("bob", bob)):
            assert load(s, image(f"{name} {i}")) == 0
            assert cache_bytes(daemon) <= 6 * MiB
    # Each keeps its most recent image.
    assert lookup(alice, image("alice 7")) == 0
    assert lookup(bob, image("bob 7")) == 0
    alice.close()
    bob.close()


def test_a_vm_without_a_cache_keeps_nothing(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, "module_cache = 0")
    wait_live(daemon)
    alice = unix_session(daemon)
    blob = image("not kept", 64 * 1024)
    assert load(alice, blob) == 0
    assert lookup(alice, blob) == CUDA_ERROR_NOT_FOUND
    assert cache_bytes(daemon) == 0
    alice.close()


def test_module_cache_values_are_checked(tmp_path):
    assert_vm_key_refused(tmp_path, "module_cache", ("lots", "-1"),
                          "module_cache = {} is not a size")
    code, err = run_pvgpud(["--listen", f"unix://{tmp_path}/s.sock",
                            "--module-cache-max", "lots"])
    assert_refused(code, err, 2, "--module-cache-max must be a size")
