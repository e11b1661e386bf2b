"""The generic call's argument slots are ops.spec's: protocol/api/
gen_generic.py takes them from the driver_call ops' u64[] fields, and
refuses a spec whose driver_call ops disagree (a worker's slots and a
guest's would then differ)."""
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "protocol" / "ops.spec"
sys.path.insert(0, str(REPO / "protocol" / "api"))
import gen_generic as gg  # noqa: E402


def test_slots_are_the_specs(tmp_path):
    text = SPEC.read_text()
    fields = re.findall(r"^\s+(?:in|out)\s+u64\[\]\s+(?:args|results)\s+max=(\d+)",
                        text, re.M)
    assert len(fields) == 5 and len(set(fields)) == 1, fields
    assert gg.MAX_ARGS == int(fields[0])
    gg.write_table(str(tmp_path), gg.load()[1])
    assert f"#define PVGPU_GENERIC_MAX_ARGS {fields[0]}" in \
        (tmp_path / "pvgpu_generic.h").read_text()


def test_driver_call_ops_that_disagree_are_refused(tmp_path):
    text = SPEC.read_text()
    m = re.search(r"^op driver_call_data .*?^\s+out u64\[\]\s+results\s+max=(\d+)",
                  text, re.M | re.S)
    assert m, "no driver_call_data results in ops.spec"
    n = int(m.group(1))
    bad = tmp_path / "ops.spec"
    bad.write_text(text[:m.start(1)] + str(n + 1) + text[m.end(1):])
    with pytest.raises(SystemExit) as e:
        gg.max_args(str(bad))
    assert "differ in their slots" in str(e.value)
    assert gg.max_args(str(SPEC)) == n
