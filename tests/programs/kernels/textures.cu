/*
 * textures: texture and surface objects as a user meets them through the
 * runtime: a 2D float texture from an array with linear filtering and
 * normalized coordinates, a pitch2D texture and a linear one on device
 * memory, a surface written by a kernel, a layered array and a cubemap
 * read through textures; the descriptors read back; everything freed.
 *
 * Written for NVIDIA's runtime over libcuda.so.1 (pvgpu's shim has no
 * textures). It needs a GPU: the sim has no texture unit, so CI checks the
 * protocol (tests/integration/test_textures.py) and skips this program
 * there; tests/gpu/test_gpu_driver_api.py runs it natively and through
 * pvgpu and compares.
 */
#include "../check.h"

enum { W = 8, H = 8, L = 3, N = 64 };

extern "C" __global__ void sample2d(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = threadIdx.x, y = threadIdx.y;

    /* Texel centres, then halfway to the right-hand neighbour. */
    out[y * w + x] = tex2D<float>(t, (x + 0.5f) / w, (y + 0.5f) / h);
    out[w * h + y * w + x] = tex2D<float>(t, (x + 1.0f) / w, (y + 0.5f) / h);
}

extern "C" __global__ void fetch_pitch(cudaTextureObject_t t, float *out, int w)
{
    int x = threadIdx.x, y = threadIdx.y;

    out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void fetch_linear(cudaTextureObject_t t, float *out)
{
    out[threadIdx.x] = tex1Dfetch<float>(t, (int)threadIdx.x);
}

extern "C" __global__ void write_surface(cudaSurfaceObject_t s)
{
    int x = threadIdx.x, y = threadIdx.y;

    surf2Dwrite((float)(y * 100 + x) * 2.0f, s, x * (int)sizeof(float), y);
}

extern "C" __global__ void fetch_layered(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = threadIdx.x, y = threadIdx.y, l = blockIdx.x;

    out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

extern "C" __global__ void fetch_cube(cudaTextureObject_t t, float *out)
{
    const float d[6][3] = { { 1, 0, 0 }, { -1, 0, 0 }, { 0, 1, 0 },
                            { 0, -1, 0 }, { 0, 0, 1 }, { 0, 0, -1 } };
    int f = threadIdx.x;

    out[f] = texCubemap<float>(t, d[f][0], d[f][1], d[f][2]);
}

static float value(int x, int y, int l)
{
    return (float)(l * 1000 + y * 10 + x);
}

/* An array of w x h x d floats, from packed host memory, by one 3D copy. */
static void fill3d(cudaArray_t a, float *h, int w, int hh, int d)
{
    cudaMemcpy3DParms m;
    memset(&m, 0, sizeof(m));
    m.srcPtr = make_cudaPitchedPtr(h, w * sizeof(float), w, hh);
    m.dstArray = a;
    m.extent = make_cudaExtent(w, hh, d);
    m.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&m));
}

/* A resource descriptor for an array. */
static cudaResourceDesc on_array(cudaArray_t a)
{
    cudaResourceDesc res;
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    return res;
}

static cudaTextureObject_t texture_on(const cudaResourceDesc *res, cudaTextureFilterMode filter,
                                      int normalized)
{
    cudaTextureDesc td;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = filter;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = normalized;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, res, &td, NULL));
    EXPECT(t != 0);
    return t;
}

int main(void)
{
    test_begin("textures");
    require_device();
    CHECK(cudaSetDevice(0));

    float h[L * H * W], back[2 * N];
    for (int l = 0; l < L; l++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                h[(l * H + y) * W + x] = value(x, y, l);
    float *d;
    CHECK(cudaMalloc(&d, sizeof(back) * L));
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    dim3 block(W, H);

    /* 2D array, linear filtering, normalized coordinates. */
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &fd, W, H));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, h, W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc res = on_array(a);
    cudaTextureObject_t t = texture_on(&res, cudaFilterModeLinear, 1);
    cudaResourceDesc rgot;
    cudaTextureDesc tgot;
    CHECK(cudaGetTextureObjectResourceDesc(&rgot, t));
    CHECK(cudaGetTextureObjectTextureDesc(&tgot, t));
    EXPECT(rgot.resType == cudaResourceTypeArray && rgot.res.array.array == a);
    EXPECT(tgot.filterMode == cudaFilterModeLinear && tgot.normalizedCoords == 1 &&
           tgot.addressMode[0] == cudaAddressModeClamp);
    sample2d<<<1, block>>>(t, d, W, H);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back, d, 2 * N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float mid = x + 1 < W ? value(x, y, 0) + 0.5f : value(x, y, 0);
            EXPECT(back[y * W + x] == value(x, y, 0));
            EXPECT(fabsf(back[N + y * W + x] - mid) < 1e-2f);
        }
    printf("2D linear: (3,2) %.2f, halfway to (4,2) %.2f\n", back[2 * W + 3],
           back[N + 2 * W + 3]);
    CHECK(cudaDestroyTextureObject(t));

    /* Pitch2D and linear device memory, point sampling. */
    float *p;
    size_t pitch;
    CHECK(cudaMallocPitch(&p, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(p, pitch, h, W * sizeof(float), W * sizeof(float), H,
                       cudaMemcpyHostToDevice));
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypePitch2D;
    res.res.pitch2D.devPtr = p;
    res.res.pitch2D.desc = fd;
    res.res.pitch2D.width = W;
    res.res.pitch2D.height = H;
    res.res.pitch2D.pitchInBytes = pitch;
    t = texture_on(&res, cudaFilterModePoint, 0);
    fetch_pitch<<<1, block>>>(t, d, W);
    CHECK(cudaMemcpy(back, d, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(back[i] == h[i]);
    CHECK(cudaDestroyTextureObject(t));
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = p;
    res.res.linear.desc = fd;
    res.res.linear.sizeInBytes = W * sizeof(float);
    t = texture_on(&res, cudaFilterModePoint, 0);
    fetch_linear<<<1, W>>>(t, d);
    CHECK(cudaMemcpy(back, d, W * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W; i++)
        EXPECT(back[i] == h[i]);
    CHECK(cudaDestroyTextureObject(t));
    printf("pitch2D and linear: %d + %d texels\n", N, W);

    /* A surface written by a kernel, read back through a copy. */
    cudaArray_t sa;
    CHECK(cudaMallocArray(&sa, &fd, W, H, cudaArraySurfaceLoadStore));
    res = on_array(sa);
    cudaSurfaceObject_t s = 0;
    CHECK(cudaCreateSurfaceObject(&s, &res));
    EXPECT(s != 0);
    CHECK(cudaGetSurfaceObjectResourceDesc(&rgot, s));
    EXPECT(rgot.resType == cudaResourceTypeArray && rgot.res.array.array == sa);
    write_surface<<<1, block>>>(s);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy2DFromArray(back, W * sizeof(float), sa, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            EXPECT(back[y * W + x] == (float)(y * 100 + x) * 2.0f);
    printf("surface: (7,7) %.1f\n", back[N - 1]);
    CHECK(cudaDestroySurfaceObject(s));

    /* A layered array: L layers of W x H, filled by one 3D copy. */
    cudaArray_t la;
    CHECK(cudaMalloc3DArray(&la, &fd, make_cudaExtent(W, H, L), cudaArrayLayered));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags = 0;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, la));
    EXPECT(ext.width == W && ext.height == H && ext.depth == L &&
           (flags & cudaArrayLayered));
    fill3d(la, h, W, H, L);
    res = on_array(la);
    t = texture_on(&res, cudaFilterModePoint, 0);
    fetch_layered<<<L, block>>>(t, d, W, H);
    CHECK(cudaGetLastError());
    float lay[L * N];
    CHECK(cudaMemcpy(lay, d, sizeof(lay), cudaMemcpyDeviceToHost));
    for (int i = 0; i < L * N; i++)
        EXPECT(lay[i] == h[i]);
    printf("layered: layer 2 (1,1) %.1f\n", lay[2 * N + W + 1]);
    CHECK(cudaDestroyTextureObject(t));

    /* A cubemap: each face one value, read in the direction of its centre. */
    cudaArray_t ca;
    CHECK(cudaMalloc3DArray(&ca, &fd, make_cudaExtent(W, W, 6), cudaArrayCubemap));
    float faces[6 * W * W];
    for (int f = 0; f < 6; f++)
        for (int i = 0; i < W * W; i++)
            faces[f * W * W + i] = (float)(f + 1) * 1.5f;
    fill3d(ca, faces, W, W, 6);
    res = on_array(ca);
    t = texture_on(&res, cudaFilterModePoint, 1);
    fetch_cube<<<1, 6>>>(t, d);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back, d, 6 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int f = 0; f < 6; f++)
        EXPECT(back[f] == (float)(f + 1) * 1.5f);
    printf("cubemap: faces %.1f .. %.1f\n", back[0], back[5]);
    CHECK(cudaDestroyTextureObject(t));

    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(sa));
    CHECK(cudaFreeArray(la));
    CHECK(cudaFreeArray(ca));
    CHECK(cudaFree(p));
    CHECK(cudaFree(d));
    test_pass();
}
