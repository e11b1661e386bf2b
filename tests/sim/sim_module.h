/*
 * sim_module.h - what the sim executor learns from a CUDA module image.
 *
 * The image comes from a guest's __cudaRegisterFatBinary (or a driver-API
 * cuModuleLoadData) and is untrusted: sim_image_load checks every offset
 * and size against the buffer and answers a malformed image with an error
 * code, never a crash.  It accepts
 *   - a fatbinary (magic 0xBA55ED50): the sm_90 ELF cubin inside, else the
 *     newest PTX for compute_90 or older; entries may be compressed with
 *     zstd or LZ4 (nvcc 12.8+ compresses PTX by default), decompressed with
 *     the system's libzstd.so.1 / liblz4.so.1, loaded on first need;
 *   - a bare sm_90 ELF cubin;
 *   - PTX text.
 * It extracts kernels (name, parameter layout, a few attributes) and
 * __device__/__constant__ variables (name, size, initial contents).
 */
#ifndef PVGPU_SIM_MODULE_H
#define PVGPU_SIM_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "executor.h"

/* The architecture the sim pretends to be. */
#define SIM_MODULE_ARCH		90

struct sim_kernel {
	char *name;
	struct pvgpu_param_info *params;	/* by ordinal */
	uint32_t nparams;
	uint32_t param_size;		/* bytes the launch must supply */
	uint32_t max_threads;		/* __launch_bounds__, else 1024 */
	uint32_t num_regs;		/* 0: unknown */
	uint32_t static_shared;		/* __shared__ bytes */
	uint32_t local_bytes;		/* per-thread stack frame */
};

/*
 * Initialisers that hold addresses (`__device__ int *p = &x;`) need
 * relocating against where the sim places x; they are not supported and
 * read as zero.
 */
struct sim_var {
	char *name;
	uint64_t size;
	unsigned char *init;		/* first init_len bytes; rest zero */
	uint64_t init_len;
	bool constant;			/* __constant__ rather than __device__ */
};

struct sim_image {
	bool from_ptx;			/* JIT path: no register counts etc. */
	uint32_t arch;			/* SM of the cubin, or PTX target */
	struct sim_kernel *kernels;
	size_t nkernels;
	struct sim_var *vars;
	size_t nvars;
};

/* Decompressors, dlopen()ed on first need; one per executor instance. */
struct sim_codecs {
	void *zstd_lib, *lz4_lib;
	bool zstd_tried, lz4_tried;
	size_t (*zstd_decompress)(void *dst, size_t cap, const void *src,
				  size_t len);
	unsigned (*zstd_is_error)(size_t code);
	int (*lz4_decompress_safe)(const char *src, char *dst, int len,
				   int cap);
};

/*
 * Parse `size` bytes at `image`.  CUDA_SUCCESS and *out, or a CUresult:
 * CUDA_ERROR_INVALID_IMAGE (malformed container or ELF),
 * CUDA_ERROR_INVALID_PTX (PTX text that does not parse),
 * CUDA_ERROR_NO_BINARY_FOR_GPU (well-formed, but no sm_90 cubin and no
 * PTX to JIT), CUDA_ERROR_NOT_SUPPORTED (a compression whose library is
 * missing), CUDA_ERROR_OUT_OF_MEMORY.  On error, err gets one line.
 */
int32_t sim_image_load(struct sim_codecs *codecs, const void *image,
		       size_t size, struct sim_image **out,
		       char *err, size_t errlen);
void sim_image_free(struct sim_image *img);

const struct sim_kernel *sim_image_kernel(const struct sim_image *img,
					  const char *name);
const struct sim_var *sim_image_var(const struct sim_image *img,
				    const char *name);

void sim_codecs_release(struct sim_codecs *codecs);

#endif /* PVGPU_SIM_MODULE_H */
