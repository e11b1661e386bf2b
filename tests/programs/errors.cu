/*
 * errors: calls that must fail, and fail with the error native CUDA gives;
 * the last-error state (cudaGetLastError clears it, cudaPeekAtLastError does
 * not); error names and strings. None of these errors is sticky: after all
 * of them the device still works, which the end of the program checks.
 *
 * Deliberately absent: destroying a stream or event twice, which is not safe
 * natively (undefined behaviour, may crash).
 */
#include "check.h"

static void last_error_state(void)
{
    EXPECT(cudaGetLastError() == cudaSuccess);

    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)1 << 62); /* 4 EiB */
    printf("cudaMalloc(4 EiB): %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorMemoryAllocation);

    /* Peek leaves it, Get returns and clears it. */
    printf("cudaPeekAtLastError: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
    EXPECT(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
    EXPECT(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
    printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("cudaGetLastError again: %s\n", cudaGetErrorName(cudaGetLastError()));
    EXPECT(cudaPeekAtLastError() == cudaSuccess);

    /* A successful call does not clear a recorded error. */
    e = cudaMalloc(&p, (size_t)1 << 62);
    EXPECT(e == cudaErrorMemoryAllocation);
    void *ok = NULL;
    CHECK(cudaMalloc(&ok, 256));
    CHECK(cudaFree(ok));
    EXPECT(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaSuccess);
    printf("last error survives successful calls: yes\n");
}

static void bad_memory(void)
{
    unsigned char host[2 * 4096];
    memset(host, 0x5C, sizeof host);

    /* Copies to and from a freed allocation. */
    unsigned char *freed = NULL;
    CHECK(cudaMalloc((void **)&freed, 4096));
    CHECK(cudaFree(freed));
    EXPECT_ERROR("cudaMemcpy H2D to a freed pointer",
                 cudaMemcpy(freed, host, 4096, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_ERROR("cudaMemcpy D2H from a freed pointer",
                 cudaMemcpy(host, freed, 4096, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_ERROR("cudaFree of a freed pointer", cudaFree(freed), cudaErrorInvalidValue);

    /* Past the end of a live allocation. */
    unsigned char *d = NULL, *d2 = NULL;
    CHECK(cudaMalloc((void **)&d, 4096));
    CHECK(cudaMalloc((void **)&d2, 4096));
    EXPECT_ERROR("cudaMemcpy H2D past the end",
                 cudaMemcpy(d, host, 2 * 4096, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    /* A small copy into pageable memory that fails writes nothing there, not
     * even what the copy before it brought back (pvgpu: through the landing). */
    unsigned char probe[200];
    CHECK(cudaMemset(d, 0x3A, 4096));
    CHECK(cudaMemcpy(probe, d, sizeof probe, cudaMemcpyDeviceToHost));
    EXPECT(first_not(probe, sizeof probe, 0x3A) == sizeof probe);
    EXPECT_ERROR("cudaMemcpy D2H past the end",
                 cudaMemcpy(host, d + 4000, 200, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT(first_not(host, sizeof host, 0x5C) == sizeof host);
    EXPECT_ERROR("cudaMemcpy D2D past the end",
                 cudaMemcpy(d2, d + 1, 4096, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    EXPECT_ERROR("cudaMemset past the end", cudaMemset(d + 1, 0, 4096), cudaErrorInvalidValue);

    /* Pointers that were never allocated. */
    EXPECT_ERROR("cudaFree of a bogus pointer", cudaFree((void *)0x1234), cudaErrorInvalidValue);
    EXPECT_ERROR("cudaMemcpy H2D to a bogus pointer",
                 cudaMemcpy((void *)0x1000, host, 16, cudaMemcpyHostToDevice),
                 cudaErrorInvalidValue);

    /* Wrong arguments. */
    EXPECT_ERROR("cudaMemcpy with an invalid kind",
                 cudaMemcpy(d, host, 16, (cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
    EXPECT_ERROR("cudaMalloc with a NULL result pointer", cudaMalloc(NULL, 16),
                 cudaErrorInvalidValue);
    void *pinned = NULL;
    EXPECT_ERROR("cudaMallocHost of 4 EiB", cudaMallocHost(&pinned, (size_t)1 << 62),
                 cudaErrorMemoryAllocation);

    /* The allocation the failed calls aimed at is intact and usable. */
    unsigned char back[4096];
    CHECK(cudaMemset(d, 0x6B, 4096));
    CHECK(cudaMemcpy(back, d, 4096, cudaMemcpyDeviceToHost));
    EXPECT(first_not(back, 4096, 0x6B) == 4096);
    CHECK(cudaFree(d));
    CHECK(cudaFree(d2));
}

static void bad_events(void)
{
    cudaEvent_t a, b, untimed;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    float ms = 0;

    /* Documented: an event never recorded has completed. */
    EXPECT_ERROR("cudaEventQuery of an unrecorded event", cudaEventQuery(a), cudaSuccess);
    EXPECT_ERROR("cudaEventElapsedTime of unrecorded events", cudaEventElapsedTime(&ms, a, b),
                 cudaErrorInvalidResourceHandle);

    CHECK(cudaEventRecord(a, 0));
    CHECK(cudaEventRecord(untimed, 0));
    CHECK(cudaEventRecord(b, 0));
    CHECK(cudaEventSynchronize(b));
    EXPECT_ERROR("cudaEventElapsedTime with a timing-disabled event",
                 cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
    CHECK(cudaEventElapsedTime(&ms, a, b));
    EXPECT(ms >= 0.0f);

    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaEventDestroy(untimed));
}

static void names_and_strings(void)
{
    const cudaError_t codes[] = {
        cudaSuccess,
        cudaErrorInvalidValue,
        cudaErrorMemoryAllocation,
        cudaErrorInitializationError,
        cudaErrorInsufficientDriver,
        cudaErrorInvalidDevice,
        cudaErrorInvalidMemcpyDirection,
        cudaErrorNoDevice,
        cudaErrorInvalidResourceHandle,
        cudaErrorNotReady,
        cudaErrorIllegalAddress,
        cudaErrorLaunchFailure,
        cudaErrorUnknown,
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        printf("error %d: %s: %s\n", (int)codes[i], cudaGetErrorName(codes[i]),
               cudaGetErrorString(codes[i]));
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0);
}

int main(void)
{
    test_begin("errors");
    require_device();
    CHECK(cudaSetDevice(0));

    last_error_state();
    bad_memory();
    bad_events();
    names_and_strings();

    /* Invalid devices. */
    cudaDeviceProp prop;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT_ERROR("cudaSetDevice(count)", cudaSetDevice(count), cudaErrorInvalidDevice);
    EXPECT_ERROR("cudaGetDeviceProperties(-1)", cudaGetDeviceProperties(&prop, -1),
                 cudaErrorInvalidDevice);

    /* None of the above was sticky: the context still works. */
    unsigned char *d = NULL;
    unsigned char src[1000], dst[1000];
    fill_pattern(src, sizeof src, 8);
    CHECK(cudaMalloc((void **)&d, sizeof src));
    CHECK(cudaMemcpy(d, src, sizeof src, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dst, d, sizeof dst, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(src, dst, sizeof src) == 0);
    CHECK(cudaFree(d));
    CHECK(cudaDeviceSynchronize());
    EXPECT(cudaGetLastError() == cudaSuccess);
    printf("device usable after the errors: yes\n");
    test_pass();
}
