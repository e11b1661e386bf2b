/*
 * JIT options and logs as NVIDIA's matrixMulDynlinkJIT and ptxjit samples
 * use them: cuModuleLoadDataEx of PTX written for sm_10 (.version 1.4,
 * which the linker refuses: relocatable code needs PTX 3.1) with the log
 * size before the log buffer and a register limit; the same with a
 * verbose log, whose ptxas lines ("Used N registers") must be there as
 * natively; and a verbose cuLinkCreate/cuLinkAddData of vecadd.ptx.  Only
 * what is the same in every run is printed (no times, no sizes).  Each
 * PTX gets a comment unique to the run, so that the driver's JIT cache
 * (~/.nv/ComputeCache) never answers instead of ptxas: a cached result
 * has no ptxas lines in its log, natively or not.
 * argv[2]: vecadd.ptx.
 */
#include <time.h>
#include <unistd.h>

#include "drv.h"

static const char old_ptx_text[] =
	"\t.version 1.4\n"
	"\t.target sm_10, map_f64_to_f32\n"
	"\t.entry jit_fill (\n"
	"\t\t.param .u64 __cudaparm_jit_fill_p,\n"
	"\t\t.param .u32 __cudaparm_jit_fill_v)\n"
	"\t{\n"
	"\t.reg .u32 %r<4>;\n"
	"\t.reg .u64 %rd<5>;\n"
	"\tld.param.u64 \t%rd1, [__cudaparm_jit_fill_p];\n"
	"\tld.param.u32 \t%r1, [__cudaparm_jit_fill_v];\n"
	"\tmov.u32 \t%r2, %tid.x;\n"
	"\tcvt.u64.u32 \t%rd2, %r2;\n"
	"\tmul.lo.u64 \t%rd3, %rd2, 4;\n"
	"\tadd.u64 \t%rd4, %rd1, %rd3;\n"
	"\tadd.u32 \t%r3, %r1, %r2;\n"
	"\tst.global.u32 \t[%rd4+0], %r3;\n"
	"\texit;\n"
	"\t}\n";

/* PTX text with a comment naming this run appended: a copy to free. */
static char *unique(const char *ptx, size_t len)
{
	char *p = malloc(len + 64);

	if (!p) {
		printf("FAIL: out of memory\n");
		exit(1);
	}
	memcpy(p, ptx, len);
	snprintf(p + len, 64, "\n// run %d %ld\n", (int)getpid(), (long)time(NULL));
	return p;
}

/* Lines of a log that say how many registers a kernel uses. */
static int used_lines(const char *log)
{
	int n = 0;

	for (const char *p = log; (p = strstr(p, "Used ")); p++)
		n += strstr(p, " registers") != NULL;
	return n;
}

int main(int argc, char **argv)
{
	char info[8192], error[8192];
	unsigned int out[64];
	CUdeviceptr d;
	CUfunction f;
	CUmodule mod;
	CUlinkState link;
	size_t size, ptx_size;
	void *cubin;
	char *ptx, *old_ptx;
	int v = 100;
	CUresult r;

	drv_begin("driver/jitlog");
	if (argc < 3) {
		printf("FAIL: usage: jitlog IMAGE vecadd.ptx\n");
		return 2;
	}
	drv_context();
	old_ptx = unique(old_ptx_text, strlen(old_ptx_text));

	/* matrixMulDynlinkJIT's options, in its order. */
	{
		CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
					CU_JIT_MAX_REGISTERS };
		void *vals[] = { (void *)(size_t)1024, info, (void *)(size_t)32 };

		info[0] = 'x';
		r = cuModuleLoadDataEx(&mod, old_ptx, 3, opts, vals);
		printf("sm_10 PTX with options: %d, info log terminated %d, size within %d\n",
		       (int)r, memchr(info, 0, 1024) != NULL, (size_t)vals[0] <= 1024);
		DRV_EXPECT(r == CUDA_SUCCESS);
	}
	DRV(cuModuleGetFunction(&f, mod, "jit_fill"));
	DRV(cuMemAlloc(&d, sizeof(out)));
	{
		void *args[] = { &d, &v };

		DRV(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
	}
	DRV(cuMemcpyDtoH(out, d, sizeof(out)));
	printf("jit_fill: out[0] = %u, out[63] = %u\n", out[0], out[63]);
	DRV_EXPECT(out[0] == 100 && out[63] == 163);
	DRV(cuModuleUnload(mod));

	/* ptxjit's options (a verbose log) with cuModuleLoadDataEx. */
	{
		CUjit_option opts[] = { CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER,
					CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
					CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE };
		void *vals[] = { NULL, info, (void *)(size_t)sizeof(info), error,
				 (void *)(size_t)sizeof(error), (void *)(size_t)1 };
		float wall;

		info[0] = error[0] = 'x';
		r = cuModuleLoadDataEx(&mod, old_ptx, 6, opts, vals);
		memcpy(&wall, &vals[0], sizeof(wall));
		printf("verbose load: %d, ptxas register lines %d, error log empty %d, "
		       "wall time not negative %d, info size %d\n", (int)r, used_lines(info),
		       error[0] == '\0', wall >= 0.0f,
		       (size_t)vals[2] == strlen(info) + 1 || (size_t)vals[2] == strlen(info));
		DRV_EXPECT(r == CUDA_SUCCESS);
		DRV(cuModuleUnload(mod));
	}

	/* ptxjit itself: a verbose link of current PTX. */
	cubin = drv_read(argv[2], &ptx_size);
	ptx = unique(cubin, ptx_size);
	free(cubin);
	ptx_size = strlen(ptx);
	{
		CUjit_option opts[] = { CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER,
					CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
					CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE };
		void *vals[] = { NULL, info, (void *)(size_t)sizeof(info), error,
				 (void *)(size_t)sizeof(error), (void *)(size_t)1 };

		info[0] = error[0] = 'x';
		DRV(cuLinkCreate(6, opts, vals, &link));
		DRV(cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx, ptx_size + 1, 0, 0, 0, 0));
		DRV(cuLinkComplete(link, &cubin, &size));
		printf("verbose link: ptxas register lines %d, error log empty %d\n",
		       used_lines(info), error[0] == '\0');
		DRV(cuLinkDestroy(link));
	}
	/* The linker refuses sm_10 PTX, as the driver's does. */
	DRV(cuLinkCreate(0, NULL, NULL, &link));
	r = cuLinkAddData(link, CU_JIT_INPUT_PTX, old_ptx, strlen(old_ptx) + 1, 0, 0, 0, 0);
	if (!r)
		r = cuLinkComplete(link, &cubin, &size);
	printf("sm_10 PTX linked: %s\n", r ? "refused" : "accepted");
	cuLinkDestroy(link);
	free(ptx);
	free(old_ptx);
	cuMemFree(d);
	drv_pass();
}
