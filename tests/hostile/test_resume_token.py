"""A resume token is a session's, bound to the VM it was given to: another
VM that presents it (stolen, guessed, replayed) gets
CUDA_ERROR_NOT_PERMITTED and never the session, and its tries cost one
log line a second, not one each."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob  # noqa: E402

P = W.P
NOT_PERMITTED = 800
NOT_READY = 600
FEATURES = sum(1 << b for n, b in P.FEATURES.items() if n != "ring")


def hello(uri, token="", **resume):
    s = W.Session(uri)
    st, _d, outs, _ = s.call("hello", version_min=1, version_max=P.VERSION,
                             pid=os.getpid(), token=token, client="pytest",
                             features=FEATURES, **resume)
    return st, outs, s


def detached_bob(d):
    """bob's session over TCP, with a context, whose connection is gone:
    (its hello reply, the last request id it sent)."""
    st, outs, s = hello(d.tcp, token="bobtoken")
    assert st == 0 and outs["resume_lo"] | outs["resume_hi"]
    s.open_context()
    last = s.next_id - 1
    s.close()
    d.wait_log(r"vm bob: connection lost; kept")
    return outs, last


def resume(uri, outs, last, token=""):
    deadline = time.monotonic() + 10
    while True:
        st, rep, s = hello(uri, token=token, resume_lo=outs["resume_lo"],
                           resume_hi=outs["resume_hi"], last_reply=last)
        if st != NOT_READY or time.monotonic() > deadline:
            return st, rep, s
        s.close()
        time.sleep(0.05)


def test_another_vms_token_is_refused(start_pvgpud, tmp_path):
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken")
    outs, last = detached_bob(d)
    # alice (this uid, over Unix) with bob's token.
    st, rep, s = resume(d.unix, outs, last)
    assert st == NOT_PERMITTED, st
    assert rep.get("session_id", 0) == 0
    s.close()
    # A TCP caller with another token: another VM, or none.
    st, _rep, s = resume(d.tcp, outs, last, token="carol")
    assert st == NOT_PERMITTED, st
    s.close()
    log = d.log()
    assert re.search(r"refused at hello: resume token of another caller's session", log), log
    # bob, with his own token, still finds his session.
    st, rep, s = resume(d.tcp, outs, last, token="bobtoken")
    assert st == 0, d.log()[-3000:]
    assert rep["session_id"] == outs["session_id"]
    s.call("bye")
    s.close()


def test_unknown_token_is_refused(start_pvgpud, tmp_path):
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken")
    outs, last = detached_bob(d)
    forged = dict(outs, resume_lo=outs["resume_lo"] ^ 1)
    st, _rep, s = resume(d.tcp, forged, last, token="bobtoken")
    assert st == NOT_PERMITTED, st
    s.close()
    assert "resume token unknown or expired" in d.log()


def test_a_flood_of_bad_tokens_is_one_line_a_second(start_pvgpud, tmp_path):
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken")
    outs, last = detached_bob(d)
    t0 = time.monotonic()
    for k in range(60):
        st, _rep, s = hello(d.tcp, token="bobtoken", resume_lo=k + 1,
                            resume_hi=7, last_reply=last)
        assert st == NOT_PERMITTED
        s.close()
    seconds = time.monotonic() - t0
    lines = re.findall(r"refused at hello: resume token", d.log())
    assert 1 <= len(lines) <= seconds + 2, (len(lines), seconds)
