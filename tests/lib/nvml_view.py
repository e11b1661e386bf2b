#!/usr/bin/env python3
"""An nvidia-smi-style view of the GPUs NVML shows, through pynvml
(NVIDIA's nvidia-ml-py), whichever libnvidia-ml.so.1 the loader finds.

  nvml_view.py            a table, as nvidia-smi prints its summary
  nvml_view.py --json     one JSON object per line: the library loaded,
                          the devices, the driver versions and every value
                          read; with --repeat, one
                          more per line read from stdin (so a test can
                          change something between two views of one
                          nvmlInit), until stdin ends

A value NVML does not support is null (JSON) or N/A (table).
"""
import json
import sys

import pynvml as N


def opt(fn, *args):
    try:
        v = fn(*args)
    except N.NVMLError as e:
        if e.value == N.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise
    return v.decode() if isinstance(v, bytes) else v


def library():
    """The libnvidia-ml.so.1 this process loaded (pvgpu's or NVIDIA's)."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "libnvidia-ml.so" in line:
                return line.split()[-1]
    return None


def view():
    out = {
        "library": library(),
        "driver": opt(N.nvmlSystemGetDriverVersion),
        "cuda": opt(N.nvmlSystemGetCudaDriverVersion),
        "count": N.nvmlDeviceGetCount(),
        "devices": [],
    }
    for i in range(out["count"]):
        h = N.nvmlDeviceGetHandleByIndex(i)
        mem = N.nvmlDeviceGetMemoryInfo(h)
        mem2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        pci = N.nvmlDeviceGetPciInfo(h)
        util = opt(N.nvmlDeviceGetUtilizationRates, h)
        procs = opt(N.nvmlDeviceGetComputeRunningProcesses, h) or []
        uuid = N.nvmlDeviceGetUUID(h)
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
        out["devices"].append({
            "index": i,
            "name": N.nvmlDeviceGetName(h),
            "uuid": uuid,
            "by_uuid": N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)),
            "by_bus_id": N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(bus)),
            "minor": N.nvmlDeviceGetMinorNumber(h),
            "bus_id": bus,
            "pci_device_id": pci.pciDeviceId,
            "compute_capability": list(N.nvmlDeviceGetCudaComputeCapability(h)),
            "memory": {"total": mem.total, "used": mem.used, "free": mem.free},
            "memory_v2": {"total": mem2.total, "used": mem2.used, "free": mem2.free},
            "utilization": None if util is None else util.gpu,
            "processes": [{"pid": p.pid, "used": p.usedGpuMemory} for p in procs],
        })
    return out


def table(v):
    na = lambda x: "N/A" if x is None else x  # noqa: E731
    print("Driver Version: %s    CUDA Version: %s" % (
        na(v["driver"]),
        na(v["cuda"] and "%d.%d" % (v["cuda"] // 1000, v["cuda"] % 1000 // 10))))
    for d in v["devices"]:
        m = d["memory"]
        print("%d  %-32s %s  %s  %5d MiB / %5d MiB  %s%%" % (
            d["index"], d["name"], d["uuid"], d["bus_id"], m["used"] >> 20,
            m["total"] >> 20, na(d["utilization"])))
    for d in v["devices"]:
        for p in d["processes"]:
            print("%d  pid %-8d %d MiB" % (d["index"], p["pid"], p["used"] >> 20))


def main():
    as_json = "--json" in sys.argv
    N.nvmlInit()
    try:
        if not as_json:
            table(view())
            return
        print(json.dumps(view()), flush=True)
        if "--repeat" in sys.argv:
            for _ in sys.stdin:
                print(json.dumps(view()), flush=True)
    finally:
        N.nvmlShutdown()


if __name__ == "__main__":
    main()
