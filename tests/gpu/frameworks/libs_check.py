"""What a user of one NVIDIA library checks, printed as one JSON line.

`python3 libs_check.py LIBRARY` with LIBRARY one of LIBRARIES below.  Each
library is reached the way users reach it from Python: through CuPy
(cuBLAS, cuFFT, cuRAND, cuSPARSE, cuSOLVER, NCCL) or PyTorch (cuBLASLt,
cuDNN).  Every figure is reduced to a float64 sum so that the native run and
the pvgpu run can be compared by tests/gpu/test_gpu_driver_api.py; a step
that raises records "error: ..." under its name, which never equals the
native figure.
"""
import json
import sys
import time


def cupy_rng():
    import cupy as cp
    return cp, cp.random.RandomState(seed=1)


def total(x):
    return float(x.astype("float64").sum()) if hasattr(x, "astype") else float(x)


def cublas():
    cp, rs = cupy_rng()
    out = {}
    for dt in ("float16", "float32", "float64", "complex64"):
        a = rs.standard_normal((256, 192)).astype(dt)
        b = rs.standard_normal((192, 128)).astype(dt)
        c = a @ b
        out["gemm_" + dt] = float(cp.abs(c).astype(cp.float64).sum())
    batch = rs.standard_normal((16, 64, 32)).astype("float32")
    out["gemm_batched"] = total(cp.matmul(batch, batch.transpose(0, 2, 1)))
    strided = rs.standard_normal((64, 128)).astype("float32")[:, ::2]
    out["gemm_strided"] = total(strided.T @ strided)
    v = rs.standard_normal(4096).astype("float32")
    out["dot"] = float(cp.dot(v, v))
    out["gemv"] = total(rs.standard_normal((512, 4096)).astype("float32") @ v)
    return out


def cublaslt():
    import torch
    torch.manual_seed(0)
    dev = torch.device("cuda")
    out = {}
    x = torch.randn(128, 256, device=dev)
    w = torch.randn(512, 256, device=dev)
    bias = torch.randn(512, device=dev)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        # addmm with a bias is cuBLASLt's epilogue path in PyTorch
        y = torch.nn.functional.linear(x.to(dt), w.to(dt), bias.to(dt))
        out["linear_" + str(dt).split(".")[1]] = float(y.double().sum())
    y = torch.nn.functional.gelu(torch.addmm(bias, x, w.t()))
    out["addmm_gelu"] = float(y.double().sum())
    return out


def cufft():
    cp, rs = cupy_rng()
    import cupyx.scipy.fft as cufft
    out = {}
    x1 = rs.standard_normal(1 << 14).astype("complex64")
    out["fft1d"] = total(cp.abs(cp.fft.fft(x1)))
    x2 = rs.standard_normal((256, 256)).astype("complex64")
    out["fft2d"] = total(cp.abs(cp.fft.fft2(x2)))
    x3 = rs.standard_normal((32, 32, 32)).astype("complex128")
    out["fft3d"] = total(cp.abs(cp.fft.fftn(x3)))
    r = rs.standard_normal((64, 1000)).astype("float32")
    out["rfft_batched"] = total(cp.abs(cp.fft.rfft(r, axis=1)))
    plan = cufft.get_fft_plan(x2, axes=(0, 1))
    with plan:
        out["fft2d_plan"] = total(cp.abs(cufft.ifft2(cufft.fft2(x2))))
    return out


def curand():
    import cupy as cp
    out = {}
    # cupy.random.RandomState is cuRAND's host API (curandGenerate*)
    rs = cp.random.RandomState(seed=7)
    out["uniform"] = total(rs.uniform(size=100000))
    out["normal"] = total(rs.standard_normal(100000))
    out["poisson"] = total(rs.poisson(3.0, size=10000))
    # XORWOW through cuRAND's device API, in CuPy's kernels
    g = cp.random.Generator(cp.random.XORWOW(seed=11))
    out["device_xorwow"] = total(g.random(100000))
    return out


def cusparse():
    cp, rs = cupy_rng()
    import cupyx.scipy.sparse as sp
    out = {}
    a = sp.random(2000, 1500, density=0.01, format="csr", dtype=cp.float32,
                  random_state=rs)
    v = rs.standard_normal(1500).astype("float32")
    out["spmv_csr"] = total(a @ v)
    m = rs.standard_normal((1500, 16)).astype("float32")
    out["spmm_csr"] = total(a @ m)
    out["spmv_coo"] = total(a.tocoo() @ v)
    out["transpose_csr"] = total((a.T.tocsr() @ rs.standard_normal(2000).astype("float32")))
    out["spgemm"] = total((a @ a.T).data)
    return out


def cusolver():
    cp, rs = cupy_rng()
    out = {}
    a = rs.standard_normal((256, 256))
    spd = a @ a.T + 256 * cp.eye(256)
    b = rs.standard_normal(256)
    out["lu_solve"] = total(cp.linalg.solve(a, b))
    q, r = cp.linalg.qr(a)
    out["qr"] = total(cp.abs(r.diagonal()))
    out["qr_orth"] = float(cp.abs(q.T @ q - cp.eye(256)).max() < 1e-10)
    w = cp.linalg.eigh(spd)[0]
    out["eigh"] = total(w)
    out["cholesky"] = total(cp.linalg.cholesky(spd).diagonal())
    out["svd"] = total(cp.linalg.svd(a, compute_uv=False))
    out["inv"] = float(cp.abs(a @ cp.linalg.inv(a) - cp.eye(256)).max() < 1e-8)
    return out


def cudnn():
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    out = {"version": torch.backends.cudnn.version()}
    x = torch.randn(8, 16, 32, 32, device=dev, requires_grad=True)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).to(dev)
    y = conv(x)
    out["conv_fwd"] = float(y.double().sum())
    y.square().sum().backward()
    out["conv_bwd_data"] = float(x.grad.double().sum())
    out["conv_bwd_filter"] = float(conv.weight.grad.double().sum())
    with torch.autocast("cuda", dtype=torch.float16):
        out["conv_fp16"] = float(conv(x).double().sum())
    bn = torch.nn.BatchNorm2d(32).to(dev)
    out["batchnorm"] = float(bn(y).double().sum())
    out["conv3d"] = float(torch.nn.functional.conv3d(
        torch.randn(2, 4, 8, 8, 8, device=dev),
        torch.randn(6, 4, 3, 3, 3, device=dev)).double().sum())
    return out


def nccl():
    import cupy as cp
    from cupy.cuda import nccl as n
    out = {"version": n.get_version()}
    comm = n.NcclCommunicator(1, n.get_unique_id(), 0)
    x = cp.arange(1 << 16, dtype=cp.float32)
    y = cp.empty_like(x)
    stream = cp.cuda.Stream.null.ptr
    comm.allReduce(x.data.ptr, y.data.ptr, x.size, n.NCCL_FLOAT32, n.NCCL_SUM, stream)
    out["allreduce"] = total(y)
    comm.broadcast(x.data.ptr, y.data.ptr, x.size, n.NCCL_FLOAT32, 0, stream)
    out["broadcast"] = total(y)
    comm.reduce(x.data.ptr, y.data.ptr, x.size, n.NCCL_FLOAT32, n.NCCL_MAX, 0, stream)
    out["reduce_max"] = float(y.max())
    cp.cuda.Device().synchronize()
    comm.destroy()
    return out


LIBRARIES = {f.__name__: f for f in (cublas, cublaslt, cufft, curand, cusparse,
                                     cusolver, cudnn, nccl)}


def main():
    name = sys.argv[1]
    t = time.perf_counter()
    try:
        out = LIBRARIES[name]()
    except Exception as e:  # the message is the result the test shows
        out = {"error": f"error: {type(e).__name__}: {e}"}
    out["run_s"] = time.perf_counter() - t
    print(json.dumps(out))


if __name__ == "__main__":
    main()
