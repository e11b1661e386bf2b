#define _GNU_SOURCE
/*
 * procaddr_probe.c - a fact-finding tool for the GPU machine, not part of
 * pvgpu: for every cu* name NVIDIA's libcuda.so.1 exports (read from
 * `nm -D` output on stdin), ask the real driver's cuGetProcAddress_v2 for
 * the base name at a range of CUDA versions, with each stream flag, and
 * print which exported symbol it hands back.  The table tells the
 * generator (protocol/api/) which variant each (version, flags) gets.
 *
 *   nm -D --defined-only libcuda.so.1 | ./procaddr_probe > procaddr.tsv
 */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

static const int versions[] = {
	2000, 3000, 3020, 4000, 4010, 4020, 5000, 5050, 6000, 6050, 7000,
	7050, 8000, 9000, 9010, 9020, 10000, 10010, 10020, 11000, 11010,
	11020, 11030, 11040, 11050, 11060, 11070, 11080, 12000, 12010, 12020,
	12030, 12040, 12050, 12060, 12080, 12090, 13000,
};

/* cuMemAlloc_v2_ptds -> cuMemAlloc */
static void base_name(const char *sym, char *out, size_t len)
{
	size_t n;

	snprintf(out, len, "%s", sym);
	for (;;) {
		n = strlen(out);
		if (n > 5 && (!strcmp(out + n - 5, "_ptds") ||
			      !strcmp(out + n - 5, "_ptsz"))) {
			out[n - 5] = '\0';
			continue;
		}
		if (n > 3 && out[n - 3] == '_' && out[n - 2] == 'v' &&
		    isdigit((unsigned char)out[n - 1])) {
			out[n - 3] = '\0';
			continue;
		}
		break;
	}
}

int main(void)
{
	static char names[4096][256];
	char line[512], addr[64], type[8], sym[256], base[256];
	int n = 0, i, j, k, seen;

	if (cuInit(0) != CUDA_SUCCESS) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	while (fgets(line, sizeof(line), stdin) && n < 4096) {
		if (sscanf(line, "%63s %7s %255s", addr, type, sym) != 3 ||
		    strncmp(sym, "cu", 2))
			continue;
		base_name(sym, base, sizeof(base));
		for (seen = 0, i = 0; i < n && !seen; i++)
			seen = !strcmp(names[i], base);
		if (!seen)
			snprintf(names[n++], sizeof(names[0]), "%s", base);
	}
	printf("name\tversion\tflags\tresult\tstatus\tsymbol\n");
	for (i = 0; i < n; i++)
		for (j = 0; j < (int)(sizeof(versions) / sizeof(versions[0])); j++)
			for (k = 0; k < 3; k++) {
				CUdriverProcAddressQueryResult st = 0;
				void *p = NULL;
				Dl_info di = { 0 };
				CUresult r = cuGetProcAddress(names[i], &p,
					versions[j], k ? 1u << (k - 1) : 0, &st);

				if (p)
					dladdr(p, &di);
				printf("%s\t%d\t%d\t%d\t%d\t%s\n", names[i],
				       versions[j], k ? 1 << (k - 1) : 0, r,
				       (int)st, p ? (di.dli_sname ? di.dli_sname : "?") : "-");
			}
	return 0;
}
