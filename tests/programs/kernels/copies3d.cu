/*
 * copies3d: 3D copies of pitched memory (cudaMalloc3D, cudaMemcpy3D and
 * cudaMemcpy3DAsync over the driver's cuMemcpy3D): host to device from a
 * host buffer with a pitch and padding rows of its own, a kernel working on
 * the pitched volume, a device-to-device copy of an unaligned sub-box, and
 * back to the host, checked element by element.
 *
 * Written for NVIDIA's runtime over libcuda.so.1 (pvgpu's shim has no 3D
 * copies): tests/integration/test_driver_api.py runs it against the sim,
 * tests/gpu/test_gpu_driver_api.py on the GPU.
 */
#include "../check.h"

enum { W = 37, H = 5, D = 4, HOST_PITCH = 40, HOST_ROWS = 6 };

/* Every element of the w x h x d volume doubled. */
extern "C" __global__ void scale3d(cudaPitchedPtr p, int w, int h, int d)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y, z = blockIdx.z;
    if (x < w && y < h && z < d) {
        float *row = (float *)((char *)p.ptr + ((size_t)z * p.ysize + y) * p.pitch);
        row[x] *= 2.0f;
    }
}

static float value(int x, int y, int z)
{
    return (float)(z * 1000 + y * 100 + x);
}

int main(void)
{
    test_begin("copies3d");
    require_device();
    CHECK(cudaSetDevice(0));

    /* The host volume: rows of 40 floats, 6 rows a slice, 37 x 5 used. */
    size_t hsize = (size_t)HOST_PITCH * HOST_ROWS * D;
    float *h = (float *)calloc(hsize, sizeof(float));
    EXPECT(h);
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                h[(z * HOST_ROWS + y) * HOST_PITCH + x] = value(x, y, z);

    cudaExtent ext = make_cudaExtent(W * sizeof(float), H, D);
    cudaPitchedPtr dp;
    CHECK(cudaMalloc3D(&dp, ext));
    printf("pitch covers a row: %s\n", dp.pitch >= W * sizeof(float) ? "yes" : "no");
    EXPECT(dp.pitch >= W * sizeof(float) && dp.ysize == H);

    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(h, HOST_PITCH * sizeof(float), W, HOST_ROWS);
    up.dstPtr = dp;
    up.extent = ext;
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));

    scale3d<<<dim3(1, H, D), 64>>>(dp, W, H, D);
    CHECK(cudaGetLastError());

    /* A 10 x 3 x 2 box from (2, 1, 1), unaligned, into a tight volume. */
    cudaExtent box = make_cudaExtent(10 * sizeof(float), 3, 2);
    cudaPitchedPtr dq;
    CHECK(cudaMalloc3D(&dq, box));
    cudaMemcpy3DParms dd = {};
    dd.srcPtr = dp;
    dd.srcPos = make_cudaPos(2 * sizeof(float), 1, 1);
    dd.dstPtr = dq;
    dd.extent = box;
    dd.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&dd));

    /* Both back, asynchronously, into tight host volumes. */
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float *g = (float *)calloc((size_t)W * H * D, sizeof(float));
    float *b = (float *)calloc(10 * 3 * 2, sizeof(float));
    EXPECT(g && b);
    cudaMemcpy3DParms down = {};
    down.srcPtr = dp;
    down.dstPtr = make_cudaPitchedPtr(g, W * sizeof(float), W, H);
    down.extent = ext;
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&down, s));
    cudaMemcpy3DParms down2 = {};
    down2.srcPtr = dq;
    down2.dstPtr = make_cudaPitchedPtr(b, 10 * sizeof(float), 10, 3);
    down2.extent = box;
    down2.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&down2, s));
    CHECK(cudaStreamSynchronize(s));

    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (g[(z * H + y) * W + x] != 2 * value(x, y, z))
                    fail("volume (%d, %d, %d) = %g", x, y, z, g[(z * H + y) * W + x]);
    printf("volume %dx%dx%d doubled: ok\n", W, H, D);
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 10; x++)
                if (b[(z * 3 + y) * 10 + x] != 2 * value(x + 2, y + 1, z + 1))
                    fail("box (%d, %d, %d) = %g", x, y, z, b[(z * 3 + y) * 10 + x]);
    printf("box 10x3x2 from (2, 1, 1): ok, first %g last %g\n", b[0], b[59]);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dp.ptr));
    CHECK(cudaFree(dq.ptr));
    free(h);
    free(g);
    free(b);
    test_pass();
}
