"""The window header is written down twice, once per language:
common/window.h for C (the guest library, pvgpud's worker, xen-vchan and
pvgpu.ko, which includes it) and qemu-device/pvgpuvm/window.py for Python
(qemu-device, scripts/vm/pvgpuvm.py and the tests import it).  DESIGN §1.

This test keeps the two the same: it compiles a probe against window.h
that prints the constants and, for every field window.py names, the C
compiler's offset, size and type, and compares them with window.py's.  A
field that one side has and the other lacks fails too: one only in
window.py does not compile, one only in window.h leaves C's struct larger
than window.py's fields, or moves the ones after it.  The last tests change
each side alone, on copies, and see that the comparison says so.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "qemu-device"))
from pvgpuvm import window  # noqa: E402
from pvgpuvm.spec import WindowLayout  # noqa: E402

COMMON = os.path.join(REPO, "common")

# The C structs window.py describes, by name.
STRUCTS = {
    "pvgpu_window_header": window.HEADER_FIELDS,
    "pvgpu_window_counter": window.COUNTER_FIELDS,
}
COUNTER_FORMAT = "".join(fmt for _, fmt in window.COUNTER_FIELDS)

# Values for the layout fields, written by C and packed by Python.
SAMPLE = dict(size=16 << 20, window_id=0x123456789ABCDEF0, staging_offset=4096,
              slot_size=1 << 20, nslots=8)

PROBE_HEAD = r"""
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "window.h"

/* What a field is, in the words of Python's struct module ("bytes": an
 * array of bytes, padding or reserved). */
#define KIND(x) _Generic((x), uint8_t: "B", uint16_t: "H", uint32_t: "I", \
	uint64_t: "Q", uint8_t *: "bytes", \
	struct pvgpu_window_counter: "counter", default: "other")
#define FIELD(s, f) printf("field " #s " " #f " %zu %zu %s\n", \
	offsetof(struct s, f), sizeof(((struct s *)0)->f), \
	KIND(((struct s *)0)->f))

int main(void)
{
	struct pvgpu_window_header h;

	printf("const MAGIC %llu\n", (unsigned long long)PVGPU_WINDOW_MAGIC);
	printf("const LAYOUT %llu\n", (unsigned long long)PVGPU_WINDOW_LAYOUT);
	printf("const HDR_SIZE %llu\n", (unsigned long long)PVGPU_WINDOW_HDR_SIZE);
"""


def kind(fmt):
    """What window.py says a field is, as KIND() in the probe says it."""
    if fmt == COUNTER_FORMAT:
        return "counter"
    if fmt.endswith("x"):
        return "bytes"
    return fmt


def probe_source(structs, sample):
    lines = [PROBE_HEAD]
    for s, fields in structs.items():
        lines.append(f'\tprintf("sizeof {s} %zu\\n", sizeof(struct {s}));')
        lines += [f"\tFIELD({s}, {name});" for name, _ in fields]
    lines.append("\tmemset(&h, 0, sizeof(h));")
    lines.append("\th.magic = PVGPU_WINDOW_MAGIC;")
    lines.append("\th.layout = PVGPU_WINDOW_LAYOUT;")
    lines += [f"\th.{name} = {value}ull;" for name, value in sample.items()]
    lines.append('\tprintf("bytes ");')
    lines.append("\tfor (size_t i = 0; i < sizeof(h); i++)")
    lines.append('\t\tprintf("%02x", ((unsigned char *)&h)[i]);')
    lines.append('\tprintf("\\n");')
    lines.append("\treturn 0;\n}\n")
    return "\n".join(lines)


def compiler():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to read common/window.h with")
    return cc


def c_facts(tmp_path, include_dir=COMMON, structs=STRUCTS):
    """What the C compiler says about window.h in include_dir, for the
    fields `structs` names; a string (the compiler's complaint) when the
    probe does not compile, e.g. because window.h lacks such a field."""
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(probe_source(structs, SAMPLE))
    proc = subprocess.run([compiler(), "-std=c11", "-Wall", "-Wextra", "-Werror",
                           f"-I{include_dir}", "-o", str(exe), str(src)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return proc.stderr
    out = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True).stdout
    facts = {"const": {}, "sizeof": {}, "field": {}}
    for line in out.splitlines():
        what, rest = line.split(" ", 1)
        if what == "const":
            name, value = rest.split()
            facts["const"][name] = int(value)
        elif what == "sizeof":
            name, value = rest.split()
            facts["sizeof"][name] = int(value)
        elif what == "field":
            s, name, off, size, k = rest.split()
            facts["field"][(s, name)] = (int(off), int(size), k)
        elif what == "bytes":
            facts["bytes"] = bytes.fromhex(rest)
    return facts


def disagreements(facts, structs=STRUCTS, constants=None):
    """Where window.h (facts) and a Python description disagree: a list of
    sentences, empty when they agree."""
    if isinstance(facts, str):
        errors = sorted({line.split("error: ", 1)[1] for line in facts.splitlines()
                         if "error: " in line}) or [facts]
        return ["the probe does not compile against window.h (a field "
                "window.py names that window.h lacks?): " + "; ".join(errors)]
    if constants is None:
        constants = dict(MAGIC=window.MAGIC, LAYOUT=window.LAYOUT,
                         HDR_SIZE=window.HDR_SIZE)
    out = []
    for name, value in constants.items():
        if facts["const"][name] != value:
            out.append(f"PVGPU_WINDOW_{name} is {facts['const'][name]:#x} in C, "
                       f"{value:#x} in window.py")
    for s, fields in structs.items():
        at = 0
        for name, fmt in fields:
            size = struct.calcsize("<" + fmt)
            want = (at, size, kind(fmt))
            have = facts["field"][(s, name)]
            if have != want:
                out.append(f"struct {s}.{name}: C has offset {have[0]}, size "
                           f"{have[1]}, {have[2]}; window.py offset {want[0]}, "
                           f"size {want[1]}, {want[2]}")
            at += size
        if facts["sizeof"][s] != at:
            out.append(f"struct {s} is {facts['sizeof'][s]} bytes in C, but "
                       f"window.py's fields for it end at {at} (a field only "
                       "one side has?)")
    if facts["sizeof"]["pvgpu_window_header"] > facts["const"]["HDR_SIZE"]:
        out.append("struct pvgpu_window_header is larger than its page")
    return out


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    return c_facts(tmp_path_factory.mktemp("window"))


def test_window_py_is_window_h(facts):
    assert disagreements(facts) == []


def test_window_py_packs_the_c_struct(facts):
    """Byte for byte, the byte order and the zeroed rest included."""
    assert not isinstance(facts, str), facts
    packed = window.pack_header(WindowLayout(**SAMPLE))
    assert len(packed) == window.OFFSETS["h2d_filled"]
    c_bytes = facts["bytes"]
    assert packed == c_bytes[:len(packed)]
    assert c_bytes[len(packed):] == bytes(len(c_bytes) - len(packed))
    magic, version, got = window.unpack_header(c_bytes)
    assert (magic, version, got) == (window.MAGIC, window.LAYOUT, WindowLayout(**SAMPLE))


def test_scripts_vm_pvgpuvm_takes_the_layout_from_window_py(tmp_path):
    """The VM test helper has no layout of its own: its window files are
    window.py's headers."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "scripts_vm_pvgpuvm", os.path.join(REPO, "scripts", "vm", "pvgpuvm.py"))
    vm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vm)
    assert (vm.WINDOW_MAGIC, vm.WINDOW_LAYOUT, vm.WINDOW_HDR_SIZE) == \
        (window.MAGIC, window.LAYOUT, window.HDR_SIZE)
    path = tmp_path / "w"
    vm.make_window(path, 1 << 20, 7)
    magic, version, got = window.unpack_header(path.read_bytes())
    assert (magic, version) == (window.MAGIC, window.LAYOUT)
    assert (got.size, got.window_id, got.staging_offset) == (1 << 20, 7, window.HDR_SIZE)


# ---- the comparison notices a change made on one side only -----------------

def changed_fields(fields, change):
    """fields with change(list) applied to a copy."""
    fields = list(fields)
    change(fields)
    return tuple(fields)


def swap(a, b):
    def change(fields):
        names = [n for n, _ in fields]
        i, j = names.index(a), names.index(b)
        fields[i], fields[j] = fields[j], fields[i]
    return change


def insert_before(before, field):
    def change(fields):
        fields.insert([n for n, _ in fields].index(before), field)
    return change


def append(field):
    def change(fields):
        fields.append(field)
    return change


def replace(name, *new):
    def change(fields):
        i = [n for n, _ in fields].index(name)
        fields[i:i + 1] = new
    return change


PY_CHANGES = [
    ("two fields swapped", swap("slot_size", "nslots")),
    ("a field moved", swap("window_id", "staging_offset")),
    ("a field added in the reserved bytes",
     replace("reserved", ("flags", "I"), ("reserved", "20x"))),
    ("a field added between the counters", insert_before("d2h_taken", ("extra", "Q"))),
    ("a field added at the end", append(("extra", "Q"))),
    ("a field removed", replace("nslots")),
    ("a field widened", replace("nslots", ("nslots", "Q"))),
    ("a field's sign changed", replace("slot_size", ("slot_size", "i"))),
]


@pytest.mark.parametrize("what, change", PY_CHANGES,
                         ids=[what for what, _ in PY_CHANGES])
def test_a_change_to_window_py_alone_is_caught(tmp_path, what, change):
    structs = dict(STRUCTS, pvgpu_window_header=changed_fields(
        window.HEADER_FIELDS, change))
    assert disagreements(c_facts(tmp_path, structs=structs), structs), what


@pytest.mark.parametrize("name", ["MAGIC", "LAYOUT", "HDR_SIZE"])
def test_a_constant_changed_in_window_py_alone_is_caught(facts, name):
    constants = dict(MAGIC=window.MAGIC, LAYOUT=window.LAYOUT,
                     HDR_SIZE=window.HDR_SIZE)
    constants[name] += 1
    assert disagreements(facts, constants=constants)


def bump(match):
    """The number in `match` plus one, in the same notation."""
    text = match.group(0)
    return hex(int(text, 0) + 1) if text.startswith("0x") else str(int(text) + 1)


# (what, regular expression, replacement) on window.h's text; each
# expression must match once, or window.h changed and the case with it.
C_CHANGES = [
    ("two fields swapped", r"(uint32_t slot_size;[^\n]*)\n(\s*uint32_t nslots;)",
     r"\2\n\1"),
    ("a field added in the reserved bytes", r"uint8_t reserved\[64 - 40\];",
     "uint32_t flags;\n\tuint8_t reserved[64 - 44];"),
    ("a field added at the end", r"struct pvgpu_window_counter d2h_taken;",
     "struct pvgpu_window_counter d2h_taken;\n\tuint64_t extra;"),
    ("a field added to a counter", r"uint8_t pad\[56\];",
     "uint64_t seq;\n\tuint8_t pad[48];"),
    ("a field widened", r"uint32_t nslots;", "uint64_t nslots;"),
    ("the magic changed", r"(?<=#define PVGPU_WINDOW_MAGIC\t)0x[0-9a-fA-F]+", bump),
    ("the layout version changed", r"(?<=#define PVGPU_WINDOW_LAYOUT\t)\d+", bump),
]


@pytest.mark.parametrize("what, pattern, repl", C_CHANGES,
                         ids=[what for what, _, _ in C_CHANGES])
def test_a_change_to_window_h_alone_is_caught(tmp_path, what, pattern, repl):
    with open(os.path.join(COMMON, "window.h")) as f:
        text, n = re.subn(pattern, repl, f.read())
    assert n == 1, f"window.h changed; update this case: {pattern!r}"
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "window.h").write_text(text)
    assert disagreements(c_facts(tmp_path, include_dir=inc)), what
