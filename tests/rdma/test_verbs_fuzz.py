"""The verbs:// wire decoders (transport/verbs/verbs_wire.c) under libFuzzer
for a bounded time: rdma_cm private data of the connect request and the
accept, ring slot headers and REF slots' references, all from an untrusted peer
(tests/rdma/fuzz_verbs_wire.c says what must hold)."""
import os
import subprocess
import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
FUZZER = REPO / os.environ.get("PVGPU_BUILD", "build") / "fuzz" / "fuzz_verbs_wire"


def seeds():
    ring = struct.pack("<IBBBBQI", 0x76677670, 1, 0, 18, 15, 0x7f0000001000, 0x1234)
    hello = ring + bytes([5]) + b"tok-a" + bytes(56 - len(ring) - 6)
    slot = struct.pack("<IIII", 7, 100, 0x76677670, 0) + struct.pack("<II", 7, 4096)
    # A REF slot: where pinned bytes are, for the receiver's RDMA READ.
    ref = struct.pack("<IIII", 7, 16, 0x76677670, 1) + struct.pack("<QII", 0x7f0000001000, 0x1234, 1 << 20)
    # A slot whose message goes on in the next (PVGPU_VERBS_SLOT_MORE).
    more = struct.pack("<IIII", 7, 100, 0x76677670, 0x100) + struct.pack("<II", 7, 4096)
    return {"hello": hello, "accept": ring + bytes(4), "slot": slot, "ref": ref, "more": more}


@pytest.mark.skipif(not FUZZER.exists(),
                    reason="fuzzer not built (make fuzz needs clang with libFuzzer)")
def test_fuzz_verbs_wire(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, raw in seeds().items():
        (corpus / name).write_bytes(raw)
    seconds = int(os.environ.get("PVGPU_FUZZ_SECONDS", "30")) // 3 or 1
    proc = subprocess.run(
        [str(FUZZER), f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=1024",
         "-max_len=256", str(corpus)],
        cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 120)
    tail = proc.stderr[-4000:]
    assert proc.returncode == 0, f"fuzzer found a failure:\n{tail}"
    assert "Done" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")), tail
