/*
 * matmul: C = A * B with the classic tiled shared-memory kernel (16x16
 * tiles, two __syncthreads per tile), for square and ragged shapes. The
 * entries are small integers, so every product and partial sum is exact in
 * float whatever the order of summation or use of FMA: the result equals
 * the host's bit for bit and the checksum is the same everywhere.
 */
#include "../check.h"

#define TILE 16

extern "C" __global__ void matmul_tiled(const float *A, const float *B, float *C,
                                        int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;

    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        int ak = t * TILE + tx, bk = t * TILE + ty;
        As[ty][tx] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[ty][tx] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}

static void run(int M, int N, int K, uint32_t seed)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = (float *)malloc(na * sizeof(float));
    float *B = (float *)malloc(nb * sizeof(float));
    float *C = (float *)malloc(nc * sizeof(float));
    float *ref = (float *)malloc(nc * sizeof(float));
    EXPECT(A && B && C && ref);

    uint32_t x = seed;
    for (size_t i = 0; i < na; i++) {
        x = x * 1664525u + 1013904223u;
        A[i] = (float)((int)(x >> 28) - 8); /* -8 .. 7 */
    }
    for (size_t i = 0; i < nb; i++) {
        x = x * 1664525u + 1013904223u;
        B[i] = (float)((int)(x >> 28) - 8);
    }
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += A[(size_t)r * K + k] * B[(size_t)k * N + c];
            ref[(size_t)r * N + c] = acc;
        }

    float *dA, *dB, *dC;
    CHECK(cudaMalloc((void **)&dA, na * sizeof(float)));
    CHECK(cudaMalloc((void **)&dB, nb * sizeof(float)));
    CHECK(cudaMalloc((void **)&dC, nc * sizeof(float)));
    CHECK(cudaMemcpy(dA, A, na * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B, nb * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dC, 0xff, nc * sizeof(float)));

    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled<<<grid, block>>>(dA, dB, dC, M, N, K);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(C, dC, nc * sizeof(float), cudaMemcpyDeviceToHost));

    for (size_t i = 0; i < nc; i++)
        if (C[i] != ref[i])
            fail("%dx%dx%d: C[%zu] = %g, expected %g", M, N, K, i, C[i], ref[i]);
    double trace = 0;
    for (int i = 0; i < M && i < N; i++)
        trace += C[(size_t)i * N + i];
    printf("M=%d N=%d K=%d grid=%ux%u: ok, trace %.0f, checksum %016llx\n",
           M, N, K, grid.x, grid.y, trace,
           (unsigned long long)checksum(C, nc * sizeof(float)));

    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    free(A);
    free(B);
    free(C);
    free(ref);
}

int main(void)
{
    test_begin("matmul");
    require_device();
    CHECK(cudaSetDevice(0));

    run(16, 16, 16, 1);
    run(64, 64, 64, 2);
    run(100, 75, 37, 3);
    run(1, 200, 129, 4);
    run(257, 1, 50, 5);
    run(256, 192, 320, 6);

    CHECK(cudaDeviceSynchronize());
    test_pass();
}
