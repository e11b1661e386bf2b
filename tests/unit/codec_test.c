/*
 * codec_test.c - the generated encoders/decoders: round trips, and every
 * way an untrusted payload can be wrong (short, long, over a max, NUL in a
 * string) is refused rather than read past.
 */
#include <stdio.h>
#include <string.h>

#include "pvgpu_proto.h"

#include "unit_check.h"

static void test_hello_round_trip(void)
{
	struct pvgpu_hello_req in = { .version_min = 1, .version_max = 7,
				      .pid = 4242 }, out;
	uint8_t buf[PVGPU_HELLO_REQ_MAX];
	long n;

	strcpy(in.token, "vm-token");
	in.token_len = 8;
	strcpy(in.client, "prog");
	in.client_len = 4;
	n = pvgpu_hello_req_encode(buf, &in);
	CHECK(n == 12 + 4 + 8 + 4 + 4);
	CHECK(pvgpu_hello_req_decode(buf, (size_t)n, &out) == 0);
	CHECK(out.version_max == 7 && out.pid == 4242);
	CHECK(!strcmp(out.token, "vm-token") && !strcmp(out.client, "prog"));

	/* Every truncation is refused, and so is a trailing byte. */
	for (long cut = 0; cut < n; cut++)
		CHECK(pvgpu_hello_req_decode(buf, (size_t)cut, &out) == -1);
	buf[n] = 0;
	CHECK(pvgpu_hello_req_decode(buf, (size_t)n + 1, &out) == -1);

	/* A NUL inside a string would let "a\0b" pass as "a". */
	buf[12 + 4 + 2] = '\0';
	CHECK(pvgpu_hello_req_decode(buf, (size_t)n, &out) == -1);
}

static void test_length_limits(void)
{
	struct pvgpu_hello_req in = { 0 }, out;
	uint8_t buf[PVGPU_HELLO_REQ_MAX + 16];
	long n;

	/* Encoders refuse what decoders would refuse. */
	in.token_len = 257;
	CHECK(pvgpu_hello_req_encode(buf, &in) == -1);

	/* A length field larger than the message, or than the max. */
	in.token_len = 0;
	n = pvgpu_hello_req_encode(buf, &in);
	CHECK(n == 20);
	pvgpu_put_u32(buf + 12, 0xffffffffu);
	CHECK(pvgpu_hello_req_decode(buf, (size_t)n, &out) == -1);
	pvgpu_put_u32(buf + 12, 300);
	CHECK(pvgpu_hello_req_decode(buf, sizeof(buf), &out) == -1);
}

static void test_arrays(void)
{
	struct pvgpu_device_get_attributes_req in = { .device = 3 }, out;
	struct pvgpu_device_get_attributes_rep rep = { 0 }, rout;
	uint8_t buf[PVGPU_DEVICE_GET_ATTRIBUTES_REQ_MAX];
	long n;

	in.attrs_count = 3;
	in.attrs[0] = 1;
	in.attrs[1] = -5;
	in.attrs[2] = 75;
	n = pvgpu_device_get_attributes_req_encode(buf, &in);
	CHECK(n == 4 + 4 + 12);
	CHECK(pvgpu_device_get_attributes_req_decode(buf, (size_t)n, &out) == 0);
	CHECK(out.device == 3 && out.attrs_count == 3 && out.attrs[1] == -5);

	/* A count over the max, or more elements than bytes. */
	pvgpu_put_u32(buf + 4, 257);
	CHECK(pvgpu_device_get_attributes_req_decode(buf, (size_t)n, &out) == -1);
	pvgpu_put_u32(buf + 4, 4);
	CHECK(pvgpu_device_get_attributes_req_decode(buf, (size_t)n, &out) == -1);

	rep.values_count = 257;
	CHECK(pvgpu_device_get_attributes_rep_encode(buf, &rep) == -1);
	rep.values_count = 1;
	rep.values[0] = 42;
	n = pvgpu_device_get_attributes_rep_encode(buf, &rep);
	CHECK(pvgpu_device_get_attributes_rep_decode(buf, (size_t)n, &rout) == 0);
	CHECK(rout.values_count == 1 && rout.values[0] == 42);
}

static void test_float_and_header(void)
{
	struct pvgpu_tex_create_req in = { .mip_bias = 1.5f, .border3 = -2.25f }, out;
	struct pvgpu_hdr h = { PVGPU_MAGIC, 1, 0x43, 0, 24, 0x1122334455667788ull }, h2;
	uint8_t buf[PVGPU_HDR_SIZE], fbuf[PVGPU_TEX_CREATE_REQ_MAX];
	long n = pvgpu_tex_create_req_encode(fbuf, &in);

	CHECK(n > 0);
	CHECK(pvgpu_tex_create_req_decode(fbuf, (size_t)n, &out) == 0 &&
	      out.mip_bias == 1.5f && out.border3 == -2.25f);

	pvgpu_hdr_encode(buf, &h);
	CHECK(buf[0] == 'P' && buf[1] == 'V' && buf[2] == 'G' && buf[3] == 'P');
	CHECK(pvgpu_hdr_decode(buf, &h2) == 0 && h2.id == h.id &&
	      h2.opcode == 0x43 && h2.length == 24);
	buf[0] ^= 1;
	CHECK(pvgpu_hdr_decode(buf, &h2) == -1);
}

static void test_op_table(void)
{
	const struct pvgpu_op_info *info = pvgpu_op_info(PVGPU_OP_MEMCPY_HTOD);

	CHECK(info && !strcmp(info->name, "memcpy_htod") &&
	      info->data_dir == PVGPU_DATA_IN && !info->is_async);
	info = pvgpu_op_info(PVGPU_OP_MEMSET_ASYNC);
	CHECK(info && info->is_async && info->data_dir == PVGPU_DATA_NONE);
	CHECK(pvgpu_op_info(0xfff0) == NULL);
	CHECK(pvgpu_op_info(PVGPU_OP_DATA) == NULL);
}

int main(void)
{
	test_hello_round_trip();
	test_length_limits();
	test_arrays();
	test_float_and_header();
	test_op_table();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
