/*
 * sim_module.c - parse a CUDA module image (fatbinary, ELF cubin or PTX)
 * into the kernels and variables the sim executor needs.
 *
 * Nothing here trusts the image: every offset and size is checked against
 * the buffer before use, with overflow-safe arithmetic, and every string is
 * bounded by the section it lives in.  Layouts are NVIDIA's, as produced by
 * nvcc 13 and observed with readelf; they are not documented, so the
 * parser only relies on the fields it needs and checks those for sanity.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "sim_module.h"

/* Fatbinary container: header, then entries each followed by a payload. */
#define FATBIN_MAGIC		0xba55ed50u
#define FATBIN_HDR_MIN		16
#define FATBIN_ENTRY_MIN	64	/* 80 for PTX, 112 on sm_100+ */
#define FATBIN_KIND_PTX		1
#define FATBIN_KIND_ELF		2
#define FATBIN_FLAG_LZ4		0x2000ULL	/* raw LZ4 block */
#define FATBIN_FLAG_ZSTD	0x8000ULL	/* zstd frame */
/* Entry header fields we use (byte offsets). */
#define FE_KIND			0x00	/* u16 */
#define FE_HDR_SIZE		0x04	/* u32 */
#define FE_PAYLOAD_SIZE		0x08	/* u64, padded to 8 */
#define FE_COMPRESSED_SIZE	0x10	/* u32, 0 when stored plain */
#define FE_ARCH			0x1c	/* u32, e.g. 90 */
#define FE_FLAGS		0x28	/* u64 */
#define FE_EXPANDED_SIZE	0x38	/* u64, size after decompression */

/* A decompressed entry may not balloon beyond this. */
#define SIM_MAX_EXPANDED	(256u << 20)
/* cuLaunchKernel's limit on the parameter buffer since CUDA 12.1. */
#define SIM_MAX_PARAM_BYTES	32764u
/* Biggest single variable the sim will place (its whole memory, at most). */
#define SIM_MAX_VAR_BYTES	(1ULL << 37)

/* ELF, the subset a cubin uses. */
#define EM_CUDA			190
#define ELFOSABI_CUDA_OLD	0x33	/* arch in e_flags bits 0-7 */
#define ELFOSABI_CUDA		0x41	/* arch in e_flags bits 8-15 */
#define SHT_SYMTAB		2
#define SHT_STRTAB		3
#define SHT_NOBITS		8
#define SHT_CUDA_INFO		0x70000000u
#define STT_OBJECT		1
#define STT_FUNC		2
#define SHN_LORESERVE		0xff00
#define STO_CUDA_ENTRY		0x10	/* st_other bit of a __global__ */
#define ELF_EHDR_SIZE		64
#define ELF_SHDR_SIZE		64
#define ELF_PHDR_SIZE		56
#define ELF_SYM_SIZE		24
/* Shared memory sm_90 reserves at the start of every block's window. */
#define SIM_RESERVED_SHARED	1024u

/* .nv.info records: {u8 format, u8 attribute, u16 value-or-length}. */
#define EIFMT_NVAL		1
#define EIFMT_BVAL		2
#define EIFMT_HVAL		3
#define EIFMT_SVAL		4	/* u16 is the length of data that follows */
#define EIATTR_MAX_THREADS	0x05	/* {x, y, z} from __launch_bounds__ */
#define EIATTR_PARAM_CBANK	0x0a	/* {sym, u16 offset, u16 size} */
#define EIATTR_FRAME_SIZE	0x11	/* {sym, bytes} */
#define EIATTR_KPARAM_INFO	0x17	/* {index, u16 ordinal, u16 off, u32} */
#define EIATTR_CBANK_PARAM_SIZE	0x19	/* HVAL: parameter bytes */
#define EIATTR_REGCOUNT		0x2f	/* {sym, registers} */
#define EIATTR_KPARAM_INFO_V2	0x45	/* as KPARAM_INFO, plain u32 size */

struct parse {
	struct sim_codecs *codecs;
	struct sim_image *img;
	char *err;
	size_t errlen;
};

/* ------------------------------------------------------------------ */
/* helpers */

static int fail(struct parse *p, int32_t rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct parse *p, int32_t rc, const char *fmt, ...)
{
	va_list ap;

	if (p->err && p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err, p->errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static uint16_t rd16(const unsigned char *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t rd32(const unsigned char *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

static uint64_t rd64(const unsigned char *b)
{
	return (uint64_t)rd32(b) | (uint64_t)rd32(b + 4) << 32;
}

/* [off, off + n) lies within a buffer of len bytes. */
static int fits(uint64_t len, uint64_t off, uint64_t n)
{
	return off <= len && n <= len - off;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *q;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 8;
	while (ncap < need)
		ncap *= 2;
	if (ncap > SIZE_MAX / elem)
		return -1;
	q = realloc(*arr, ncap * elem);
	if (!q)
		return -1;
	*arr = q;
	*cap = ncap;
	return 0;
}

static char *dupn(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* ------------------------------------------------------------------ */
/* building the image */

struct builder {
	size_t kcap, vcap;
};

static struct sim_kernel *add_kernel(struct sim_image *img, struct builder *b,
				     const char *name, size_t len)
{
	struct sim_kernel *k;
	size_t i;

	for (i = 0; i < img->nkernels; i++)
		if (strlen(img->kernels[i].name) == len &&
		    !memcmp(img->kernels[i].name, name, len))
			return &img->kernels[i];
	if (grow((void **)&img->kernels, &b->kcap, img->nkernels + 1,
		 sizeof(*img->kernels)))
		return NULL;
	k = &img->kernels[img->nkernels];
	memset(k, 0, sizeof(*k));
	k->name = dupn(name, len);
	if (!k->name)
		return NULL;
	k->max_threads = 1024;
	img->nkernels++;
	return k;
}

static struct sim_var *add_var(struct sim_image *img, struct builder *b,
			       const char *name, size_t len)
{
	struct sim_var *v;

	if (grow((void **)&img->vars, &b->vcap, img->nvars + 1,
		 sizeof(*img->vars)))
		return NULL;
	v = &img->vars[img->nvars];
	memset(v, 0, sizeof(*v));
	v->name = dupn(name, len);
	if (!v->name)
		return NULL;
	img->nvars++;
	return v;
}

void sim_image_free(struct sim_image *img)
{
	size_t i;

	if (!img)
		return;
	for (i = 0; i < img->nkernels; i++) {
		free(img->kernels[i].name);
		free(img->kernels[i].params);
	}
	for (i = 0; i < img->nvars; i++) {
		free(img->vars[i].name);
		free(img->vars[i].init);
	}
	free(img->kernels);
	free(img->vars);
	free(img);
}

const struct sim_kernel *sim_image_kernel(const struct sim_image *img,
					  const char *name)
{
	size_t i;

	if (!img || !name)
		return NULL;
	for (i = 0; i < img->nkernels; i++)
		if (!strcmp(img->kernels[i].name, name))
			return &img->kernels[i];
	return NULL;
}

const struct sim_var *sim_image_var(const struct sim_image *img,
				    const char *name)
{
	size_t i;

	if (!img || !name)
		return NULL;
	for (i = 0; i < img->nvars; i++)
		if (!strcmp(img->vars[i].name, name))
			return &img->vars[i];
	return NULL;
}

/* ------------------------------------------------------------------ */
/* decompression, through the system's libraries */

void sim_codecs_release(struct sim_codecs *c)
{
	if (!c)
		return;
	if (c->zstd_lib)
		dlclose(c->zstd_lib);
	if (c->lz4_lib)
		dlclose(c->lz4_lib);
	memset(c, 0, sizeof(*c));
}

/*
 * Loaded at run time rather than linked: both formats are public (RFC 8878
 * and the LZ4 block format) and Debian ships both libraries in its base
 * system, but a sim that never meets a compressed image should not need
 * their development packages to build.
 */
static int load_zstd(struct parse *p)
{
	struct sim_codecs *c = p->codecs;

	if (!c->zstd_tried) {
		c->zstd_tried = true;
		c->zstd_lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
		if (c->zstd_lib) {
			*(void **)&c->zstd_decompress =
				dlsym(c->zstd_lib, "ZSTD_decompress");
			*(void **)&c->zstd_is_error =
				dlsym(c->zstd_lib, "ZSTD_isError");
		}
	}
	if (!c->zstd_decompress || !c->zstd_is_error)
		return fail(p, CUDA_ERROR_NOT_SUPPORTED,
			    "fatbinary entry is zstd-compressed and libzstd.so.1 "
			    "cannot be loaded (install libzstd1, or build with "
			    "nvcc --no-compress)");
	return 0;
}

static int load_lz4(struct parse *p)
{
	struct sim_codecs *c = p->codecs;

	if (!c->lz4_tried) {
		c->lz4_tried = true;
		c->lz4_lib = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
		if (c->lz4_lib)
			*(void **)&c->lz4_decompress_safe =
				dlsym(c->lz4_lib, "LZ4_decompress_safe");
	}
	if (!c->lz4_decompress_safe)
		return fail(p, CUDA_ERROR_NOT_SUPPORTED,
			    "fatbinary entry is LZ4-compressed and liblz4.so.1 "
			    "cannot be loaded (install liblz4-1, or build with "
			    "nvcc --no-compress)");
	return 0;
}

/* Expand `len` compressed bytes into exactly `out_len` fresh bytes. */
static int expand(struct parse *p, uint64_t flags, const unsigned char *src,
		  size_t len, uint64_t out_len, unsigned char **out)
{
	unsigned char *dst;
	int rc;

	if (!out_len || out_len > SIM_MAX_EXPANDED)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "fatbinary entry expands to %llu bytes",
			    (unsigned long long)out_len);
	rc = (flags & FATBIN_FLAG_ZSTD) ? load_zstd(p) : load_lz4(p);
	if (rc)
		return rc;
	/* One spare byte: PTX text is NUL-terminated after expansion. */
	dst = malloc((size_t)out_len + 1);
	if (!dst)
		return fail(p, CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
	if (flags & FATBIN_FLAG_ZSTD) {
		size_t n = p->codecs->zstd_decompress(dst, (size_t)out_len,
						      src, len);

		if (p->codecs->zstd_is_error(n) || n != out_len)
			goto err_corrupt;
	} else {
		int n;

		if (len > INT32_MAX)
			goto err_corrupt;
		n = p->codecs->lz4_decompress_safe((const char *)src,
						   (char *)dst, (int)len,
						   (int)out_len);
		if (n < 0 || (uint64_t)n != out_len)
			goto err_corrupt;
	}
	dst[out_len] = '\0';
	*out = dst;
	return 0;

err_corrupt:
	free(dst);
	return fail(p, CUDA_ERROR_INVALID_IMAGE,
		    "compressed fatbinary entry does not decompress");
}

/* ------------------------------------------------------------------ */
/* ELF cubin */

struct elf {
	const unsigned char *b;
	size_t len;
	uint64_t shoff;
	uint32_t shnum;
	const unsigned char *shstr;	/* section name table */
	uint64_t shstr_len;
};

struct shdr {
	uint32_t name;
	uint32_t type;
	uint64_t offset;
	uint64_t size;
	uint32_t link;
	uint32_t info;
	uint64_t entsize;
};

static void elf_shdr(const struct elf *e, uint32_t i, struct shdr *s)
{
	const unsigned char *h = e->b + e->shoff + (uint64_t)i * ELF_SHDR_SIZE;

	s->name = rd32(h + 0);
	s->type = rd32(h + 4);
	s->offset = rd64(h + 24);
	s->size = rd64(h + 32);
	s->link = rd32(h + 40);
	s->info = rd32(h + 44);
	s->entsize = rd64(h + 56);
}

/* A NUL-terminated string at off in a table of len bytes; NULL if not. */
static const char *table_str(const unsigned char *t, uint64_t len,
			     uint64_t off)
{
	if (off >= len || !memchr(t + off, '\0', (size_t)(len - off)))
		return NULL;
	return (const char *)t + off;
}

static const char *sec_name(const struct elf *e, uint32_t i)
{
	struct shdr s;
	const char *n;

	elf_shdr(e, i, &s);
	n = table_str(e->shstr, e->shstr_len, s.name);
	return n ? n : "";
}

static const unsigned char *sec_data(const struct elf *e,
				     const struct shdr *s)
{
	return e->b + s->offset;	/* checked by elf_open */
}

/* Section j whose name is prefix + suffix; 0 if none. */
static uint32_t sec_by_name(const struct elf *e, const char *prefix,
			    const char *suffix)
{
	size_t pl = strlen(prefix);
	uint32_t j;

	for (j = 1; j < e->shnum; j++) {
		const char *n = sec_name(e, j);

		if (!strncmp(n, prefix, pl) && !strcmp(n + pl, suffix))
			return j;
	}
	return 0;
}

static int elf_open(struct parse *p, struct elf *e, const unsigned char *b,
		    size_t len, bool check_arch)
{
	uint64_t phoff;
	uint16_t phnum, phent, shent, shstrndx;
	uint32_t i, arch = 0;
	struct shdr s;

	memset(e, 0, sizeof(*e));
	e->b = b;
	e->len = len;
	if (len < ELF_EHDR_SIZE || memcmp(b, "\177ELF", 4))
		return fail(p, CUDA_ERROR_INVALID_IMAGE, "not an ELF image");
	if (b[4] != 2 || b[5] != 1)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin is not 64-bit little-endian ELF");
	if (rd16(b + 18) != EM_CUDA)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "ELF image is not for a CUDA device");
	if (check_arch) {
		uint32_t flags = rd32(b + 48);

		if (b[7] == ELFOSABI_CUDA)
			arch = (flags >> 8) & 0xff;
		else if (b[7] == ELFOSABI_CUDA_OLD)
			arch = flags & 0xff;
		if (arch && arch != SIM_MODULE_ARCH)
			return fail(p, CUDA_ERROR_NO_BINARY_FOR_GPU,
				    "cubin is for sm_%u, the device is sm_%u",
				    arch, SIM_MODULE_ARCH);
	}

	phoff = rd64(b + 32);
	e->shoff = rd64(b + 40);
	phent = rd16(b + 54);
	phnum = rd16(b + 56);
	shent = rd16(b + 58);
	e->shnum = rd16(b + 60);
	shstrndx = rd16(b + 62);
	if (phnum && (phent != ELF_PHDR_SIZE ||
		      !fits(len, phoff, (uint64_t)phnum * ELF_PHDR_SIZE)))
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin program headers out of bounds");
	if (!e->shnum || shent != ELF_SHDR_SIZE ||
	    !fits(len, e->shoff, (uint64_t)e->shnum * ELF_SHDR_SIZE))
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin section headers out of bounds");
	for (i = 1; i < e->shnum; i++) {
		elf_shdr(e, i, &s);
		if (s.type != SHT_NOBITS && !fits(len, s.offset, s.size))
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "cubin section %u out of bounds", i);
	}
	if (!shstrndx || shstrndx >= e->shnum)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin has no section name table");
	elf_shdr(e, shstrndx, &s);
	if (s.type != SHT_STRTAB)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin section name table is not a string table");
	e->shstr = sec_data(e, &s);
	e->shstr_len = s.size;
	return 0;
}

/*
 * Walk the records of a .nv.info section, calling fn for each; fn gets the
 * attribute, the inline 16-bit value, and the data of an SVAL record.
 */
typedef int (*info_fn)(struct parse *p, void *arg, uint8_t attr,
		       uint16_t val, const unsigned char *data, size_t dlen);

static int info_walk(struct parse *p, const unsigned char *d, uint64_t len,
		     info_fn fn, void *arg)
{
	uint64_t pos = 0;
	int rc;

	while (pos < len) {
		uint8_t fmt, attr;
		uint16_t val;
		uint64_t dlen = 0;

		if (len - pos < 4)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "truncated .nv.info record");
		fmt = d[pos];
		attr = d[pos + 1];
		val = rd16(d + pos + 2);
		if (fmt == EIFMT_SVAL) {
			dlen = val;
			if (!fits(len, pos + 4, dlen))
				return fail(p, CUDA_ERROR_INVALID_IMAGE,
					    "truncated .nv.info record");
		} else if (fmt != EIFMT_NVAL && fmt != EIFMT_BVAL &&
			   fmt != EIFMT_HVAL) {
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "bad .nv.info record format %u", fmt);
		}
		rc = fn(p, arg, attr, val, fmt == EIFMT_SVAL ? d + pos + 4 :
			NULL, (size_t)dlen);
		if (rc)
			return rc;
		pos += 4 + dlen;
	}
	return 0;
}

struct kparam {
	uint32_t ordinal, offset, size;
};

struct kinfo {
	struct kparam *kp;
	size_t nkp, kpcap;
	bool have_cbank;
	uint32_t cbank_size;
	uint32_t max_threads;
};

static int kinfo_record(struct parse *p, void *arg, uint8_t attr,
			uint16_t val, const unsigned char *d, size_t dlen)
{
	struct kinfo *ki = arg;
	struct kparam *k;

	switch (attr) {
	case EIATTR_KPARAM_INFO:
	case EIATTR_KPARAM_INFO_V2:
		if (!d || dlen < 12)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "short KPARAM_INFO record");
		if (grow((void **)&ki->kp, &ki->kpcap, ki->nkp + 1,
			 sizeof(*ki->kp)))
			return fail(p, CUDA_ERROR_OUT_OF_MEMORY,
				    "out of host memory");
		k = &ki->kp[ki->nkp++];
		k->ordinal = rd16(d + 4);
		k->offset = rd16(d + 6);
		/*
		 * The first form packs the size into bits 18-31 of its last
		 * word (the low bits describe the constant bank); the
		 * second, used once a parameter outgrows 14 bits, stores it
		 * as is.
		 */
		if (attr == EIATTR_KPARAM_INFO)
			k->size = (rd32(d + 8) >> 18) & 0x3fff;
		else
			k->size = rd32(d + 8) & 0xffff;
		break;
	case EIATTR_PARAM_CBANK:
		if (!d || dlen < 8)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "short PARAM_CBANK record");
		ki->have_cbank = true;
		ki->cbank_size = rd16(d + 6);
		break;
	case EIATTR_CBANK_PARAM_SIZE:
		if (!ki->have_cbank) {
			ki->have_cbank = true;
			ki->cbank_size = val;
		}
		break;
	case EIATTR_MAX_THREADS:
		if (d && dlen >= 12) {
			uint64_t n = (uint64_t)rd32(d) * rd32(d + 4) *
				     rd32(d + 8);

			if (n && n < ki->max_threads)
				ki->max_threads = (uint32_t)n;
		}
		break;
	}
	return 0;
}

/* Turn the KPARAM records of one kernel into its layout. */
static int kinfo_layout(struct parse *p, struct sim_kernel *k,
			struct kinfo *ki)
{
	uint32_t end = 0;
	size_t i;

	if (ki->nkp > SIM_MAX_PARAM_BYTES)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "%s: too many parameters", k->name);
	if (ki->nkp) {
		k->params = calloc(ki->nkp, sizeof(*k->params));
		if (!k->params)
			return fail(p, CUDA_ERROR_OUT_OF_MEMORY,
				    "out of host memory");
	}
	k->nparams = (uint32_t)ki->nkp;
	for (i = 0; i < ki->nkp; i++) {
		struct kparam *kp = &ki->kp[i];
		struct pvgpu_param_info *pi;

		if (kp->ordinal >= ki->nkp || !kp->size)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "%s: bad parameter record", k->name);
		pi = &k->params[kp->ordinal];
		if (pi->size)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "%s: parameter %u described twice",
				    k->name, kp->ordinal);
		pi->offset = kp->offset;
		pi->size = kp->size;
		if (kp->offset + kp->size > end)
			end = kp->offset + kp->size;
	}
	if (ki->have_cbank && end > ki->cbank_size)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "%s: parameters overrun their bank", k->name);
	k->param_size = ki->have_cbank ? ki->cbank_size : end;
	if (k->param_size > SIM_MAX_PARAM_BYTES)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "%s: %u bytes of parameters", k->name,
			    k->param_size);
	k->max_threads = ki->max_threads;
	return 0;
}

/* Per-kernel values the module-wide .nv.info keys by symbol index. */
struct ginfo {
	const uint32_t *ksym;		/* symbol index of each kernel */
	struct sim_image *img;
};

static int ginfo_record(struct parse *p, void *arg, uint8_t attr,
			uint16_t val, const unsigned char *d, size_t dlen)
{
	struct ginfo *gi = arg;
	uint32_t sym, v;
	size_t i;

	(void)p;
	(void)val;
	if ((attr != EIATTR_REGCOUNT && attr != EIATTR_FRAME_SIZE) ||
	    !d || dlen < 8)
		return 0;
	sym = rd32(d);
	v = rd32(d + 4);
	for (i = 0; i < gi->img->nkernels; i++) {
		if (gi->ksym[i] != sym)
			continue;
		if (attr == EIATTR_REGCOUNT)
			gi->img->kernels[i].num_regs = v;
		else
			gi->img->kernels[i].local_bytes = v;
	}
	return 0;
}

/* A __device__ or __constant__ variable's section; false for others. */
static bool var_section(const char *n, bool *constant)
{
	const char *d;

	if (!strcmp(n, ".nv.global") || !strcmp(n, ".nv.global.init")) {
		*constant = false;
		return true;
	}
	/* .nv.constantN for N > 0; bank 0 holds kernel parameters. */
	if (strncmp(n, ".nv.constant", 12) || !n[12])
		return false;
	for (d = n + 12; *d; d++)
		if (*d < '0' || *d > '9')
			return false;
	if (!strcmp(n + 12, "0"))
		return false;
	*constant = true;
	return true;
}

static int elf_symbols(struct parse *p, const struct elf *e,
		       struct builder *bld, uint32_t **ksym_out,
		       uint32_t **ktext_out)
{
	struct sim_image *img = p->img;
	const unsigned char *syms, *str;
	struct shdr symtab, strtab, s;
	uint32_t *ksym = NULL, *ktext = NULL;
	size_t kcap = 0, tcap = 0;
	uint64_t nsym, i;
	uint32_t j;

	for (j = 1; j < e->shnum; j++) {
		elf_shdr(e, j, &symtab);
		if (symtab.type == SHT_SYMTAB)
			break;
	}
	if (j == e->shnum)
		return fail(p, CUDA_ERROR_INVALID_IMAGE, "cubin has no symbols");
	if (symtab.entsize != ELF_SYM_SIZE || !symtab.link ||
	    symtab.link >= e->shnum)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin symbol table is malformed");
	elf_shdr(e, symtab.link, &strtab);
	if (strtab.type != SHT_STRTAB)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "cubin symbol names are not a string table");
	syms = sec_data(e, &symtab);
	str = sec_data(e, &strtab);
	nsym = symtab.size / ELF_SYM_SIZE;

	for (i = 1; i < nsym; i++) {
		const unsigned char *sym = syms + i * ELF_SYM_SIZE;
		uint8_t type = sym[4] & 0xf, other = sym[5];
		uint16_t shndx = rd16(sym + 6);
		uint64_t value = rd64(sym + 8), size = rd64(sym + 16);
		const char *name, *sname;
		bool constant;

		if (type != STT_FUNC && type != STT_OBJECT)
			continue;
		if (!shndx || shndx >= SHN_LORESERVE || shndx >= e->shnum)
			continue;
		name = table_str(str, strtab.size, rd32(sym));
		if (!name || !*name)
			goto err_name;
		sname = sec_name(e, shndx);

		if (type == STT_FUNC) {
			/* Kernels own .text.NAME; device functions do not. */
			if (!(other & STO_CUDA_ENTRY) ||
			    strncmp(sname, ".text.", 6) ||
			    strcmp(sname + 6, name))
				continue;
			if (sim_image_kernel(img, name))
				continue;
			if (grow((void **)&ksym, &kcap, img->nkernels + 1,
				 sizeof(*ksym)) ||
			    grow((void **)&ktext, &tcap, img->nkernels + 1,
				 sizeof(*ktext)) ||
			    !add_kernel(img, bld, name, strlen(name)))
				goto err_nomem;
			ksym[img->nkernels - 1] = (uint32_t)i;
			ktext[img->nkernels - 1] = shndx;
			continue;
		}

		if (!var_section(sname, &constant) || !size)
			continue;
		elf_shdr(e, shndx, &s);
		if (!fits(s.size, value, size) || size > SIM_MAX_VAR_BYTES)
			goto err_var;
		if (sim_image_var(img, name))
			continue;
		{
			struct sim_var *v = add_var(img, bld, name,
						    strlen(name));

			if (!v)
				goto err_nomem;
			v->size = size;
			v->constant = constant;
			if (s.type != SHT_NOBITS) {
				v->init = malloc((size_t)size);
				if (!v->init)
					goto err_nomem;
				memcpy(v->init, sec_data(e, &s) + value,
				       (size_t)size);
				v->init_len = size;
			}
		}
	}
	*ksym_out = ksym;
	*ktext_out = ktext;
	return 0;

err_name:
	free(ksym);
	free(ktext);
	return fail(p, CUDA_ERROR_INVALID_IMAGE,
		    "cubin symbol %llu has a bad name", (unsigned long long)i);
err_var:
	free(ksym);
	free(ktext);
	return fail(p, CUDA_ERROR_INVALID_IMAGE,
		    "cubin variable lies outside its section");
err_nomem:
	free(ksym);
	free(ktext);
	return fail(p, CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
}

static int parse_elf(struct parse *p, const unsigned char *b, size_t len,
		     bool check_arch)
{
	struct sim_image *img = p->img;
	struct builder bld = { 0, 0 };
	uint32_t *ksym = NULL, *ktext = NULL;
	bool reserved_shared;
	struct shdr s;
	struct elf e;
	uint32_t j;
	size_t i;
	int rc;

	rc = elf_open(p, &e, b, len, check_arch);
	if (rc)
		return rc;
	img->arch = SIM_MODULE_ARCH;
	rc = elf_symbols(p, &e, &bld, &ksym, &ktext);
	if (rc)
		return rc;

	/* Each kernel's own .nv.info.NAME: parameters, launch bounds. */
	for (i = 0; i < img->nkernels; i++) {
		struct sim_kernel *k = &img->kernels[i];
		struct kinfo ki = { .max_threads = 1024 };

		for (j = 1; j < e.shnum; j++) {
			elf_shdr(&e, j, &s);
			if (s.type == SHT_CUDA_INFO && s.info == ktext[i] &&
			    !strncmp(sec_name(&e, j), ".nv.info.", 9))
				break;
		}
		if (j < e.shnum)
			rc = info_walk(p, sec_data(&e, &s), s.size,
				       kinfo_record, &ki);
		if (!rc)
			rc = kinfo_layout(p, k, &ki);
		free(ki.kp);
		if (rc)
			goto out;
	}

	/* Module-wide .nv.info: registers and stack frames by symbol. */
	j = sec_by_name(&e, ".nv.info", "");
	if (j) {
		struct ginfo gi = { ksym, img };

		elf_shdr(&e, j, &s);
		rc = info_walk(p, sec_data(&e, &s), s.size, ginfo_record, &gi);
		if (rc)
			goto out;
	}

	/*
	 * Static shared memory: .nv.shared.NAME, which on sm_90 starts with
	 * the 1 KiB the system reserves when the module has a
	 * .nv.shared.reserved section; the driver does not count that part.
	 */
	reserved_shared = false;
	for (j = 1; j < e.shnum; j++)
		if (!strncmp(sec_name(&e, j), ".nv.shared.reserved.", 20))
			reserved_shared = true;
	for (i = 0; i < img->nkernels; i++) {
		struct sim_kernel *k = &img->kernels[i];
		uint64_t sz;

		j = sec_by_name(&e, ".nv.shared.", k->name);
		if (!j)
			continue;
		elf_shdr(&e, j, &s);
		sz = s.size;
		if (reserved_shared)
			sz = sz > SIM_RESERVED_SHARED ?
			     sz - SIM_RESERVED_SHARED : 0;
		if (sz > UINT32_MAX) {
			rc = fail(p, CUDA_ERROR_INVALID_IMAGE,
				  "%s: bad shared memory size", k->name);
			goto out;
		}
		k->static_shared = (uint32_t)sz;
	}
out:
	free(ksym);
	free(ktext);
	return rc;
}

/* ------------------------------------------------------------------ */
/* PTX text */

struct ptx {
	const char *s;
	size_t n, pos;
	const char *tok;		/* current token */
	size_t len;
};

static bool ptx_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '%' ||
	       c == '.';
}

/* Advance to the next token; false at the end of the text. */
static bool ptx_next(struct ptx *x)
{
	const char *s = x->s;

	for (;;) {
		while (x->pos < x->n && (s[x->pos] == ' ' || s[x->pos] == '\t' ||
					 s[x->pos] == '\n' || s[x->pos] == '\r'))
			x->pos++;
		if (x->pos + 1 < x->n && s[x->pos] == '/' &&
		    s[x->pos + 1] == '/') {
			while (x->pos < x->n && s[x->pos] != '\n')
				x->pos++;
			continue;
		}
		if (x->pos + 1 < x->n && s[x->pos] == '/' &&
		    s[x->pos + 1] == '*') {
			x->pos += 2;
			while (x->pos + 1 < x->n &&
			       !(s[x->pos] == '*' && s[x->pos + 1] == '/'))
				x->pos++;
			x->pos = x->pos + 2 <= x->n ? x->pos + 2 : x->n;
			continue;
		}
		break;
	}
	if (x->pos >= x->n) {
		x->tok = s + x->n;
		x->len = 0;
		return false;
	}
	x->tok = s + x->pos;
	if (ptx_ident_char(s[x->pos])) {
		while (x->pos < x->n && ptx_ident_char(s[x->pos]))
			x->pos++;
	} else if (s[x->pos] == '"') {
		x->pos++;
		while (x->pos < x->n && s[x->pos] != '"' && s[x->pos] != '\n')
			x->pos++;
		if (x->pos < x->n && s[x->pos] == '"')
			x->pos++;
	} else {
		x->pos++;
	}
	x->len = (size_t)(s + x->pos - x->tok);
	return true;
}

static bool tok_is(const struct ptx *x, const char *w)
{
	return x->len == strlen(w) && !memcmp(x->tok, w, x->len);
}

static bool tok_is_name(const struct ptx *x)
{
	char c = x->len ? x->tok[0] : '\0';

	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       c == '$' || c == '%';
}

/* An unsigned decimal/hex number token; false if it is not one. */
static bool tok_uint(const struct ptx *x, uint64_t *v)
{
	char buf[32], *end;

	if (!x->len || x->len >= sizeof(buf) || x->tok[0] < '0' ||
	    x->tok[0] > '9')
		return false;
	memcpy(buf, x->tok, x->len);
	buf[x->len] = '\0';
	if (x->len > 1 && buf[x->len - 1] == 'U')
		buf[x->len - 1] = '\0';
	errno = 0;
	*v = strtoull(buf, &end, 0);
	return !errno && !*end;
}

/* Scalar types: size in bytes, whether floating; 0 if not a type. */
static unsigned ptx_type(const struct ptx *x, bool *fp)
{
	static const struct {
		const char *name;
		unsigned size;
		bool fp;
	} types[] = {
		{ ".b8", 1, false }, { ".u8", 1, false }, { ".s8", 1, false },
		{ ".b16", 2, false }, { ".u16", 2, false }, { ".s16", 2, false },
		{ ".b32", 4, false }, { ".u32", 4, false }, { ".s32", 4, false },
		{ ".b64", 8, false }, { ".u64", 8, false }, { ".s64", 8, false },
		{ ".b128", 16, false },
		{ ".f16", 2, false }, { ".bf16", 2, false },
		{ ".f16x2", 4, false }, { ".bf16x2", 4, false },
		{ ".f32", 4, true }, { ".f64", 8, true },
		{ ".pred", 1, false },
	};
	size_t i;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (tok_is(x, types[i].name)) {
			*fp = types[i].fp;
			return types[i].size;
		}
	return 0;
}

static int ptx_bad(struct parse *p, const struct ptx *x, const char *what)
{
	size_t line = 1, i;

	for (i = 0; i < (size_t)(x->tok - x->s); i++)
		if (x->s[i] == '\n')
			line++;
	return fail(p, CUDA_ERROR_INVALID_PTX, "PTX line %zu: %s", line, what);
}

/* Optional `[N]` dimensions after a name: multiplies *count. */
static int ptx_dims(struct parse *p, struct ptx *x, uint64_t *count,
		    bool *unsized)
{
	uint64_t n;

	*unsized = false;
	while (tok_is(x, "[")) {
		if (!ptx_next(x))
			return ptx_bad(p, x, "unterminated array size");
		if (tok_is(x, "]")) {
			*unsized = true;
		} else {
			if (!tok_uint(x, &n) || !n ||
			    *count > SIM_MAX_VAR_BYTES / n)
				return ptx_bad(p, x, "bad array size");
			*count *= n;
			if (!ptx_next(x) || !tok_is(x, "]"))
				return ptx_bad(p, x, "expected ]");
		}
		ptx_next(x);
	}
	return 0;
}

/* Store one initialiser element (the current token) at element idx. */
static int ptx_init_elem(struct parse *p, struct ptx *x, struct sim_var *v,
			 unsigned esize, bool fp, uint64_t idx, bool neg)
{
	unsigned char bytes[8] = { 0 };
	char buf[64], *end;
	uint64_t bits;
	uint64_t off;

	if (!x->len || x->len >= sizeof(buf))
		return ptx_bad(p, x, "bad initialiser");
	memcpy(buf, x->tok, x->len);
	buf[x->len] = '\0';

	if (x->len == 10 && (buf[1] == 'f' || buf[1] == 'F') && buf[0] == '0') {
		bits = strtoull(buf + 2, &end, 16);		/* 0fXXXXXXXX */
		if (*end)
			return ptx_bad(p, x, "bad float literal");
	} else if (x->len == 18 && (buf[1] == 'd' || buf[1] == 'D') &&
		   buf[0] == '0') {
		bits = strtoull(buf + 2, &end, 16);		/* 0dXXXX... */
		if (*end)
			return ptx_bad(p, x, "bad double literal");
	} else if (fp && (strchr(buf, '.') || strchr(buf, 'e') ||
			  strchr(buf, 'E'))) {
		double d = strtod(buf, &end);

		if (*end)
			return ptx_bad(p, x, "bad float literal");
		if (neg)
			d = -d;
		if (esize == 4) {
			float f = (float)d;
			uint32_t u;

			memcpy(&u, &f, 4);
			bits = u;
		} else {
			memcpy(&bits, &d, 8);
		}
	} else if (buf[0] >= '0' && buf[0] <= '9') {
		size_t l = strlen(buf);

		if (l > 1 && buf[l - 1] == 'U')
			buf[l - 1] = '\0';
		errno = 0;
		if (buf[0] == '0' && (buf[1] == 'b' || buf[1] == 'B'))
			bits = strtoull(buf + 2, &end, 2);
		else
			bits = strtoull(buf, &end, 0);
		if (errno || *end)
			return ptx_bad(p, x, "bad integer literal");
		if (fp) {
			double d = neg ? -(double)bits : (double)bits;

			if (esize == 4) {
				float f = (float)d;
				uint32_t u;

				memcpy(&u, &f, 4);
				bits = u;
			} else {
				memcpy(&bits, &d, 8);
			}
		} else if (neg) {
			bits = (uint64_t)0 - bits;
		}
	} else {
		/* generic(sym), a bare symbol: an address; unsupported. */
		bits = 0;
	}
	if (idx >= v->size / esize)
		return ptx_bad(p, x, "too many initialisers");
	off = idx * esize;
	if (off + esize > v->init_len) {
		/* Grow the stored prefix; the tail stays zero. */
		uint64_t nlen = v->init_len ? v->init_len : 64;
		unsigned char *n;

		while (nlen < off + esize)
			nlen *= 2;
		if (nlen > v->size)
			nlen = v->size;
		n = realloc(v->init, (size_t)nlen);
		if (!n)
			return fail(p, CUDA_ERROR_OUT_OF_MEMORY,
				    "out of host memory");
		memset(n + v->init_len, 0, (size_t)(nlen - v->init_len));
		v->init = n;
		v->init_len = nlen;
	}
	for (unsigned i = 0; i < esize && i < 8; i++)
		bytes[i] = (unsigned char)(bits >> (8 * i));
	memcpy(v->init + off, bytes, esize < 8 ? esize : 8);
	return 0;
}

/*
 * `= value` or `= { ... }` (nested, flattened) for variable v; returns on
 * the token after the initialiser.
 */
static int ptx_initialiser(struct parse *p, struct ptx *x, struct sim_var *v,
			   unsigned esize, bool fp)
{
	uint64_t idx = 0;
	int depth = 0, rc;
	bool neg = false;

	for (;;) {
		if (!x->len || tok_is(x, ";") || tok_is(x, "="))
			return depth ? ptx_bad(p, x, "unterminated initialiser") : 0;
		if (tok_is(x, "{")) {
			depth++;
		} else if (tok_is(x, "}")) {
			if (--depth < 0)
				return ptx_bad(p, x, "unbalanced }");
			if (!depth) {
				ptx_next(x);
				return 0;
			}
		} else if (tok_is(x, ",")) {
			if (!depth)
				return 0;	/* the next declarator */
			neg = false;
		} else if (tok_is(x, "-")) {
			neg = !neg;
		} else if (tok_is(x, "+")) {
			/* sym+4 or generic(sym)+4: skip the addend */
			ptx_next(x);
		} else if (tok_is(x, "(") || tok_is(x, ")") ||
			   tok_is(x, "generic")) {
			/* the rest of an address */
		} else {
			rc = ptx_init_elem(p, x, v, esize, fp, idx++, neg);
			if (rc)
				return rc;
			neg = false;
		}
		ptx_next(x);
	}
}

/*
 * After `.global`/`.const`/`.shared`: attributes, type, declarators, up to
 * and including `;`.  Adds variables to the image unless `sizes_only`, in
 * which case it returns the total (aligned) size in *total.
 */
static int ptx_var_decl(struct parse *p, struct ptx *x, struct builder *bld,
			bool constant, bool skip, uint64_t *total)
{
	unsigned esize = 0, vec = 1;
	uint64_t align = 0;
	bool fp = false, opaque = false;
	int rc;

	while (ptx_next(x) && !tok_is(x, ";")) {
		unsigned sz;
		bool f;

		if (tok_is(x, ".align")) {
			if (!ptx_next(x) || !tok_uint(x, &align) || !align ||
			    (align & (align - 1)) || align > 4096)
				return ptx_bad(p, x, "bad .align");
		} else if (tok_is(x, ".v2") || tok_is(x, ".v4") ||
			   tok_is(x, ".v8")) {
			vec = (unsigned)(x->tok[2] - '0');
		} else if (tok_is(x, ".attribute")) {
			/* .attribute(.managed): a managed variable */
			if (!ptx_next(x) || !tok_is(x, "("))
				return ptx_bad(p, x, "bad .attribute");
			while (ptx_next(x) && !tok_is(x, ")"))
				;
		} else if ((sz = ptx_type(x, &f))) {
			esize = sz;
			fp = f;
		} else if (tok_is(x, ".texref") || tok_is(x, ".samplerref") ||
			   tok_is(x, ".surfref")) {
			opaque = true;
		} else if (tok_is_name(x)) {
			const char *name = x->tok;
			size_t nlen = x->len;
			uint64_t count = vec;
			bool unsized;
			struct sim_var *v = NULL;

			if (!esize && !opaque)
				return ptx_bad(p, x, "variable without a type");
			ptx_next(x);
			rc = ptx_dims(p, x, &count, &unsized);
			if (rc)
				return rc;
			if (opaque || unsized || skip) {
				/* not data the sim places */
			} else if (total) {
				uint64_t a = align ? align : esize;

				*total = (*total + a - 1) / a * a +
					 count * esize;
			} else if (count > SIM_MAX_VAR_BYTES / esize) {
				return ptx_bad(p, x, "variable too large");
			} else {
				v = add_var(p->img, bld, name, nlen);
				if (!v)
					return fail(p, CUDA_ERROR_OUT_OF_MEMORY,
						    "out of host memory");
				v->size = count * esize;
				v->constant = constant;
			}
			if (tok_is(x, "=")) {
				ptx_next(x);
				if (v) {
					rc = ptx_initialiser(p, x, v, esize,
							     fp);
					if (rc)
						return rc;
				} else {
					/* skip what we do not place */
					while (x->len && !tok_is(x, ";") &&
					       !tok_is(x, ","))
						ptx_next(x);
				}
			}
			if (tok_is(x, ";"))
				return 0;
			if (!tok_is(x, ","))
				return ptx_bad(p, x, "expected , or ;");
		} else {
			return ptx_bad(p, x, "unexpected token in a variable");
		}
	}
	if (!tok_is(x, ";"))
		return ptx_bad(p, x, "unterminated variable");
	return 0;
}

/* One `.param ...` of an .entry: size and alignment. */
static int ptx_param(struct parse *p, struct ptx *x, uint32_t *size,
		     uint32_t *align)
{
	unsigned esize = 0;
	uint64_t a = 0, count = 1;
	bool fp, ptr = false, unsized;
	int rc;

	if (!tok_is(x, ".param"))
		return ptx_bad(p, x, "expected .param");
	while (ptx_next(x)) {
		unsigned sz;

		if (tok_is(x, ".align")) {
			uint64_t v;

			if (!ptx_next(x) || !tok_uint(x, &v) || !v ||
			    (v & (v - 1)) || v > 4096)
				return ptx_bad(p, x, "bad .align");
			/* After .ptr, .align is the pointee's, not ours. */
			if (!ptr)
				a = v;
		} else if (tok_is(x, ".ptr")) {
			ptr = true;
		} else if ((sz = ptx_type(x, &fp))) {
			esize = sz;
		} else if (tok_is_name(x)) {
			break;
		} else if (x->len && x->tok[0] == '.') {
			/* .global/.const/... state space of a .ptr */
		} else {
			return ptx_bad(p, x, "bad parameter");
		}
	}
	if (!esize || !tok_is_name(x))
		return ptx_bad(p, x, "parameter without a type or name");
	ptx_next(x);
	rc = ptx_dims(p, x, &count, &unsized);
	if (rc)
		return rc;
	if (unsized || count > SIM_MAX_PARAM_BYTES / esize)
		return ptx_bad(p, x, "parameter too large");
	*size = (uint32_t)(count * esize);
	*align = (uint32_t)(a ? a : esize);
	return 0;
}

/* After `.entry`: name, parameters, directives, body. */
static int ptx_entry(struct parse *p, struct ptx *x, struct builder *bld)
{
	struct pvgpu_param_info *params = NULL;
	size_t np = 0, cap = 0;
	uint32_t end = 0, maxnt = 1024;
	uint64_t shared = 0;
	const char *name;
	size_t nlen;
	struct sim_kernel *k;
	int depth, rc;

	if (!ptx_next(x) || !tok_is_name(x))
		return ptx_bad(p, x, "expected a kernel name");
	name = x->tok;
	nlen = x->len;
	ptx_next(x);
	if (tok_is(x, "(")) {
		ptx_next(x);
		while (!tok_is(x, ")")) {
			uint32_t size = 0, align = 1, off;

			rc = ptx_param(p, x, &size, &align);
			if (rc)
				goto out;
			off = (end + align - 1) / align * align;
			if (off > SIM_MAX_PARAM_BYTES ||
			    size > SIM_MAX_PARAM_BYTES - off) {
				rc = ptx_bad(p, x, "parameters too large");
				goto out;
			}
			if (grow((void **)&params, &cap, np + 1,
				 sizeof(*params))) {
				rc = fail(p, CUDA_ERROR_OUT_OF_MEMORY,
					  "out of host memory");
				goto out;
			}
			params[np].offset = off;
			params[np].size = size;
			np++;
			end = off + size;
			if (tok_is(x, ","))
				ptx_next(x);
			else if (!tok_is(x, ")")) {
				rc = ptx_bad(p, x, "expected , or )");
				goto out;
			}
		}
		ptx_next(x);
	}
	/* Performance directives up to the body. */
	while (x->len && !tok_is(x, "{") && !tok_is(x, ";")) {
		if (tok_is(x, ".maxntid") || tok_is(x, ".reqntid")) {
			uint64_t prod = 1, v;

			while (ptx_next(x) && (tok_uint(x, &v) ||
					       tok_is(x, ","))) {
				if (!tok_is(x, ",") && v && prod < UINT32_MAX)
					prod *= v;
			}
			if (prod && prod < maxnt)
				maxnt = (uint32_t)prod;
			continue;
		}
		ptx_next(x);
	}
	if (!tok_is(x, "{")) {
		/* A declaration without a body defines nothing. */
		rc = 0;
		goto out;
	}
	/*
	 * The body: only static .shared declarations matter here.  A lone
	 * `.shared` token can only start one (instructions spell the state
	 * space into their opcode, ld.shared.u32).
	 */
	depth = 1;
	while (depth > 0) {
		if (!ptx_next(x)) {
			rc = ptx_bad(p, x, "unterminated kernel body");
			goto out;
		}
		if (tok_is(x, "{")) {
			depth++;
		} else if (tok_is(x, "}")) {
			depth--;
		} else if (tok_is(x, ".shared")) {
			rc = ptx_var_decl(p, x, bld, false, false, &shared);
			if (rc)
				goto out;
			if (shared > UINT32_MAX) {
				rc = ptx_bad(p, x, "too much shared memory");
				goto out;
			}
		}
	}
	ptx_next(x);

	k = add_kernel(p->img, bld, name, nlen);
	if (!k) {
		rc = fail(p, CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
		goto out;
	}
	if (k->params || k->nparams) {
		rc = ptx_bad(p, x, "kernel defined twice");
		goto out;
	}
	k->params = params;
	params = NULL;
	k->nparams = (uint32_t)np;
	k->param_size = end;
	k->max_threads = maxnt;
	k->static_shared = (uint32_t)shared;
	rc = 0;
out:
	free(params);
	return rc;
}

static int parse_ptx(struct parse *p, const char *s, size_t len,
		     uint32_t arch)
{
	struct ptx x = { .s = s, .n = strnlen(s, len) };
	struct builder bld = { 0, 0 };
	bool ext = false, seen_version = false;
	int depth = 0, rc;

	p->img->from_ptx = true;
	p->img->arch = arch;
	ptx_next(&x);
	while (x.len) {
		if (depth == 0 && tok_is(&x, ".version")) {
			seen_version = true;
		} else if (depth == 0 && tok_is(&x, ".target")) {
			/* .target sm_NN[a|f], ... */
			if (ptx_next(&x) && x.len > 3 &&
			    !memcmp(x.tok, "sm_", 3)) {
				uint32_t a = 0;
				size_t i;

				for (i = 3; i < x.len && x.tok[i] >= '0' &&
					    x.tok[i] <= '9' && a < 10000; i++)
					a = a * 10 + (uint32_t)(x.tok[i] - '0');
				if (a > SIM_MODULE_ARCH)
					return fail(p,
						CUDA_ERROR_NO_BINARY_FOR_GPU,
						"PTX is for sm_%u, the device "
						"is sm_%u", a, SIM_MODULE_ARCH);
				if (!p->img->arch)
					p->img->arch = a;
			}
			continue;
		} else if (depth == 0 && tok_is(&x, ".extern")) {
			ext = true;
		} else if (depth == 0 && tok_is(&x, ".func")) {
			/*
			 * A device function: its parameter list may name state
			 * spaces (.ptr .global), so skip to its body or `;`.
			 */
			while (ptx_next(&x) && !tok_is(&x, "{") &&
			       !tok_is(&x, ";"))
				;
			ext = false;
			continue;
		} else if (depth == 0 && tok_is(&x, ".entry")) {
			rc = ptx_entry(p, &x, &bld);
			if (rc)
				return rc;
			ext = false;
			continue;
		} else if (depth == 0 && (tok_is(&x, ".global") ||
					  tok_is(&x, ".const"))) {
			rc = ptx_var_decl(p, &x, &bld, tok_is(&x, ".const"),
					  ext, NULL);
			if (rc)
				return rc;
			ext = false;
		} else if (tok_is(&x, "{")) {
			depth++;
		} else if (tok_is(&x, "}")) {
			if (--depth < 0)
				return ptx_bad(p, &x, "unbalanced }");
			ext = false;
		} else if (tok_is(&x, ";")) {
			ext = false;
		}
		ptx_next(&x);
	}
	if (!seen_version)
		return fail(p, CUDA_ERROR_INVALID_PTX,
			    "PTX text has no .version directive");
	if (depth)
		return fail(p, CUDA_ERROR_INVALID_PTX, "PTX ends inside a block");
	return 0;
}

/* ------------------------------------------------------------------ */
/* fatbinary */

struct fat_entry {
	uint16_t kind;
	uint32_t arch;
	uint64_t flags;
	const unsigned char *payload;
	uint64_t payload_size;
	uint64_t compressed_size;
	uint64_t expanded_size;
};

static int parse_code(struct parse *p, const unsigned char *b, size_t len,
		      bool elf, uint32_t arch)
{
	if (elf)
		return parse_elf(p, b, len, false);
	return parse_ptx(p, (const char *)b, len, arch);
}

static int load_entry(struct parse *p, const struct fat_entry *fe)
{
	const unsigned char *code = fe->payload;
	size_t len = (size_t)fe->payload_size;
	unsigned char *buf = NULL;
	uint64_t comp = fe->flags & (FATBIN_FLAG_ZSTD | FATBIN_FLAG_LZ4);
	int rc;

	if (comp == (FATBIN_FLAG_ZSTD | FATBIN_FLAG_LZ4))
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "fatbinary entry claims two compressions");
	if (comp) {
		if (!fe->compressed_size ||
		    fe->compressed_size > fe->payload_size)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "bad compressed fatbinary entry");
		rc = expand(p, comp, fe->payload, (size_t)fe->compressed_size,
			    fe->expanded_size, &buf);
		if (rc)
			return rc;
		code = buf;
		len = (size_t)fe->expanded_size;
	}
	rc = parse_code(p, code, len, fe->kind == FATBIN_KIND_ELF, fe->arch);
	free(buf);
	return rc;
}

static int parse_fatbin(struct parse *p, const unsigned char *b, size_t len)
{
	struct fat_entry fe, elf = { 0 }, ptx = { 0 };
	uint16_t version, hsize;
	uint64_t fat_size, off, end;
	bool seen = false;

	version = rd16(b + 4);
	hsize = rd16(b + 6);
	fat_size = rd64(b + 8);
	if (version != 1 || hsize < FATBIN_HDR_MIN)
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "unknown fatbinary version %u", version);
	if (!fits(len, hsize, fat_size))
		return fail(p, CUDA_ERROR_INVALID_IMAGE,
			    "fatbinary truncated: %llu bytes of %llu",
			    (unsigned long long)len,
			    (unsigned long long)hsize + fat_size);
	off = hsize;
	end = hsize + fat_size;
	while (off < end) {
		const unsigned char *h = b + off;
		uint32_t ehs;

		if (end - off < FATBIN_ENTRY_MIN)
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "truncated fatbinary entry");
		ehs = rd32(h + FE_HDR_SIZE);
		memset(&fe, 0, sizeof(fe));
		fe.kind = rd16(h + FE_KIND);
		fe.payload_size = rd64(h + FE_PAYLOAD_SIZE);
		fe.compressed_size = rd32(h + FE_COMPRESSED_SIZE);
		fe.arch = rd32(h + FE_ARCH);
		fe.flags = rd64(h + FE_FLAGS);
		fe.expanded_size = rd64(h + FE_EXPANDED_SIZE);
		if (ehs < FATBIN_ENTRY_MIN || !fits(end - off, 0, ehs) ||
		    !fits(end - off - ehs, 0, fe.payload_size))
			return fail(p, CUDA_ERROR_INVALID_IMAGE,
				    "fatbinary entry out of bounds");
		fe.payload = h + ehs;

		if (fe.kind == FATBIN_KIND_ELF) {
			seen = true;
			if (fe.arch == SIM_MODULE_ARCH && !elf.payload)
				elf = fe;
		} else if (fe.kind == FATBIN_KIND_PTX) {
			seen = true;
			if (fe.arch <= SIM_MODULE_ARCH &&
			    (!ptx.payload || fe.arch > ptx.arch))
				ptx = fe;
		}
		off += ehs + fe.payload_size;
	}
	/* As the driver: a matching cubin first, else JIT the PTX. */
	if (elf.payload)
		return load_entry(p, &elf);
	if (ptx.payload)
		return load_entry(p, &ptx);
	if (seen)
		return fail(p, CUDA_ERROR_NO_BINARY_FOR_GPU,
			    "fatbinary has no sm_%u cubin and no PTX to JIT",
			    SIM_MODULE_ARCH);
	return fail(p, CUDA_ERROR_INVALID_IMAGE, "fatbinary holds no code");
}

/* ------------------------------------------------------------------ */

/* Text up to the first NUL (if any) that declares a PTX version. */
static bool looks_like_ptx(const unsigned char *b, size_t size)
{
	size_t n = strnlen((const char *)b, size), i;

	for (i = 0; i < n; i++)
		if (b[i] < 0x20 && b[i] != '\t' && b[i] != '\n' &&
		    b[i] != '\r' && b[i] != '\f' && b[i] != '\v')
			return false;
	return memmem(b, n, ".version", 8) != NULL;
}

int32_t sim_image_load(struct sim_codecs *codecs, const void *image,
		       size_t size, struct sim_image **out,
		       char *err, size_t errlen)
{
	const unsigned char *b = image;
	struct parse p = { codecs, NULL, err, errlen };
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!codecs || !out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = NULL;
	if (!image || !size)
		return fail(&p, CUDA_ERROR_INVALID_IMAGE, "empty image");
	p.img = calloc(1, sizeof(*p.img));
	if (!p.img)
		return fail(&p, CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");

	if (size >= FATBIN_HDR_MIN && rd32(b) == FATBIN_MAGIC)
		rc = parse_fatbin(&p, b, size);
	else if (size >= 4 && !memcmp(b, "\177ELF", 4))
		rc = parse_elf(&p, b, size, true);
	else if (looks_like_ptx(b, size))
		rc = parse_ptx(&p, (const char *)b, size, 0);
	else
		rc = fail(&p, CUDA_ERROR_INVALID_IMAGE,
			  "not a fatbinary, cubin or PTX");
	if (rc) {
		sim_image_free(p.img);
		return rc;
	}
	*out = p.img;
	return CUDA_SUCCESS;
}
