/*
 * Helpers shared by the test programs.
 *
 * Every program prints a transcript to stdout that must be the same natively
 * and through pvgpu on the same GPU, so nothing printed may vary between runs:
 * no pointers, no timings, no free-memory figures. The last line is "PASS"
 * (exit 0) or "FAIL: reason" (exit 1).
 */
#ifndef PVGPU_TEST_CHECK_H
#define PVGPU_TEST_CHECK_H

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Line-buffered stdout, so that what was printed before a crash is kept. */
static inline void test_begin(const char *name)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("program: %s\n", name);
}

static inline void test_pass(void)
{
    printf("PASS\n");
    fflush(stdout);
    exit(0);
}

static inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void fail(const char *fmt, ...)
{
    va_list ap;
    printf("FAIL: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

/* A call that must succeed. */
#define CHECK(call)                                                          \
    do {                                                                     \
        cudaError_t check_err_ = (call);                                     \
        if (check_err_ != cudaSuccess)                                       \
            fail("line %d: %s -> %s", __LINE__, #call,                       \
                 cudaGetErrorName(check_err_));                              \
    } while (0)

/* A condition that must hold. */
#define EXPECT(cond)                                                         \
    do {                                                                     \
        if (!(cond))                                                         \
            fail("line %d: expected %s", __LINE__, #cond);                   \
    } while (0)

/*
 * A call that must fail with a given error. Prints "label: ErrorName" so the
 * transcript shows which error came back, then clears the last-error state
 * so the next check starts clean.
 */
#define EXPECT_ERROR(label, call, expected)                                  \
    do {                                                                     \
        cudaError_t expect_err_ = (call);                                    \
        printf("%s: %s\n", (label), cudaGetErrorName(expect_err_));          \
        if (expect_err_ != (expected))                                       \
            fail("line %d: %s -> %s, expected %s", __LINE__, #call,          \
                 cudaGetErrorName(expect_err_), cudaGetErrorName(expected)); \
        (void)cudaGetLastError();                                            \
    } while (0)

/*
 * The first call of every program. With no usable device (no driver here,
 * or pvgpud unreachable) CUDA reports an error; say which one and stop
 * cleanly instead of crashing.
 */
static inline int require_device(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        printf("cudaGetDeviceCount: %s\n", cudaGetErrorName(err));
        fail("no usable CUDA device (%s)", cudaGetErrorName(err));
    }
    if (count < 1)
        fail("cudaGetDeviceCount returned %d devices", count);
    return count;
}

/* FNV-1a, 64 bit: a checksum that is the same everywhere. */
static inline uint64_t checksum(const void *buf, size_t n)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Deterministic bytes: a different sequence for every seed. */
static inline void fill_pattern(void *buf, size_t n, uint32_t seed)
{
    unsigned char *p = (unsigned char *)buf;
    uint32_t x = seed * 2654435761u + 0x9e3779b9u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

/* Index of the first byte that is not `value`, or n if all are. */
static inline size_t first_not(const void *buf, size_t n, unsigned char value)
{
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < n; i++)
        if (p[i] != value)
            return i;
    return n;
}

#define MiB ((size_t)1 << 20)

#endif
