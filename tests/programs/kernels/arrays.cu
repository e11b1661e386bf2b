/*
 * arrays: CUDA arrays as a user meets them through the runtime: 2D and 3D
 * arrays created, described, filled from pitched host memory, copied to
 * device memory and to another array with offsets, read back and checked
 * element by element, and freed.
 *
 * Written for NVIDIA's runtime over libcuda.so.1 (pvgpu's shim has no
 * arrays): tests/integration/test_driver_api.py runs it against the sim,
 * tests/gpu/test_gpu_driver_api.py on the GPU. It is among the kernel
 * programs only to stay out of the shim's program list.
 */
#include "../check.h"

enum { W = 37, H = 5, D = 3, HP = 40 };

static float value(int x, int y, int z)
{
    return (float)(z * 1000 + y * 100 + x);
}

int main(void)
{
    test_begin("arrays");
    require_device();
    CHECK(cudaSetDevice(0));

    /* 2D: 37 x 5 floats from host rows of 40. */
    float *h = (float *)calloc(HP * H * D, sizeof(float));
    EXPECT(h);
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                h[(z * H + y) * HP + x] = value(x, y, z);
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t a, b;
    CHECK(cudaMallocArray(&a, &fd, W, H));
    CHECK(cudaMallocArray(&b, &fd, W, H));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags = 99;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    printf("2D array: %zux%zux%zu, %d bits x, flags %u\n", ext.width, ext.height,
           ext.depth, got.x, flags);
    EXPECT(ext.width == W && ext.height == H && ext.depth == 0 && got.x == 32 &&
           got.f == cudaChannelFormatKindFloat && flags == 0);

    CHECK(cudaMemcpy2DToArray(a, 0, 0, h, HP * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, W * sizeof(float), H,
                                   cudaMemcpyDeviceToDevice));
    /* A 10 x 3 box from (2, 1) of the copy into pitched device memory. */
    float *d;
    size_t dpitch;
    CHECK(cudaMallocPitch(&d, &dpitch, 10 * sizeof(float), 3));
    CHECK(cudaMemcpy2DFromArray(d, dpitch, b, 2 * sizeof(float), 1, 10 * sizeof(float), 3,
                                cudaMemcpyDeviceToDevice));
    float box[30];
    CHECK(cudaMemcpy2D(box, 10 * sizeof(float), d, dpitch, 10 * sizeof(float), 3,
                       cudaMemcpyDeviceToHost));
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 10; x++)
            if (box[y * 10 + x] != value(x + 2, y + 1, 0))
                fail("2D box (%d, %d) = %g", x, y, box[y * 10 + x]);
    printf("2D box 10x3 from (2, 1): ok, first %g last %g\n", box[0], box[29]);
    /* Whole array back to host, tightly. */
    float *back = (float *)calloc(W * H * D, sizeof(float));
    EXPECT(back);
    CHECK(cudaMemcpy2DFromArray(back, W * sizeof(float), a, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            if (back[y * W + x] != value(x, y, 0))
                fail("2D array (%d, %d) = %g", x, y, back[y * W + x]);
    printf("2D array round trip: ok\n");

    /* 3D: 37 x 5 x 3, in with cudaMemcpy3D and out from an offset. */
    cudaArray_t c;
    CHECK(cudaMalloc3DArray(&c, &fd, make_cudaExtent(W, H, D)));
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, c));
    printf("3D array: %zux%zux%zu\n", ext.width, ext.height, ext.depth);
    EXPECT(ext.width == W && ext.height == H && ext.depth == D);
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(h, HP * sizeof(float), W, H);
    up.dstArray = c;
    up.extent = make_cudaExtent(W, H, D);
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    memset(back, 0, W * H * D * sizeof(float));
    cudaMemcpy3DParms down = {};
    down.srcArray = c;
    down.srcPos = make_cudaPos(1, 2, 1);
    down.dstPtr = make_cudaPitchedPtr(back, 20 * sizeof(float), 20, 3);
    down.extent = make_cudaExtent(20, 3, 2);
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 20; x++)
                if (back[(z * 3 + y) * 20 + x] != value(x + 1, y + 2, z + 1))
                    fail("3D box (%d, %d, %d) = %g", x, y, z, back[(z * 3 + y) * 20 + x]);
    printf("3D box 20x3x2 from (1, 2, 1): ok, first %g last %g\n", back[0], back[119]);

    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
    CHECK(cudaFreeArray(c));
    CHECK(cudaFree(d));
    free(h);
    free(back);
    test_pass();
}
