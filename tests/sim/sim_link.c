/*
 * sim_link.c - the sim's JIT linker: the sim runs PTX as it is (its
 * module loader reads PTX text), so "linking" checks that the inputs look
 * like what they claim to be and hands the first one back as the image,
 * with an info log naming what it took; a PTX input without a .version
 * directive fails as ptxas would, with an error log.  The options that
 * are results get plausible values: wall time 0.5 ms, and the size of
 * each log written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "exec_sim.h"

static int has(const uint8_t *p, uint64_t n, const char *what)
{
	size_t k = strlen(what);

	for (uint64_t i = 0; i + k <= n; i++)
		if (!memcmp(p + i, what, k))
			return 1;
	return 0;
}

int32_t pvgpu_sim_link(struct pvgpu_exec *ex, struct pvgpu_link *l)
{
	const uint8_t *p;
	int32_t rc = CUDA_SUCCESS;
	uint32_t ptx = 0;
	float wall = 0.5f;

	if (!ex || !l || !l->ninputs)
		return CUDA_ERROR_INVALID_VALUE;
	p = l->data;
	for (uint32_t i = 0; i < l->ninputs; i++) {
		if (l->input_type[i] == CU_JIT_INPUT_PTX) {
			ptx++;
			if (!has(p, l->input_size[i], ".version")) {
				snprintf(l->error_log, sizeof(l->error_log),
					 "ptxas fatal   : input %u: not PTX (no .version directive)", i);
				rc = CUDA_ERROR_INVALID_PTX;
				break;
			}
		}
		p += l->input_size[i];
	}
	if (!rc) {
		snprintf(l->info_log, sizeof(l->info_log),
			 "sim link: %u inputs (%u PTX), %llu bytes of image",
			 l->ninputs, ptx, (unsigned long long)l->input_size[0]);
		l->image = malloc(l->input_size[0]);
		if (!l->image)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(l->image, l->data, l->input_size[0]);
		l->image_size = l->input_size[0];
	}
	for (uint32_t i = 0; i < l->nopts; i++) {
		switch (l->opt_key[i]) {
		case CU_JIT_WALL_TIME:
			l->opt_value[i] = 0;
			memcpy(&l->opt_value[i], &wall, sizeof(wall));
			break;
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
			if (strlen(l->info_log) >= l->opt_value[i])
				l->info_log[l->opt_value[i] ? l->opt_value[i] - 1 : 0] = '\0';
			l->opt_value[i] = strlen(l->info_log) + (l->opt_value[i] != 0);
			break;
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
			if (strlen(l->error_log) >= l->opt_value[i])
				l->error_log[l->opt_value[i] ? l->opt_value[i] - 1 : 0] = '\0';
			l->opt_value[i] = strlen(l->error_log) + (l->opt_value[i] != 0);
			break;
		default:
			break;
		}
	}
	return rc;
}
