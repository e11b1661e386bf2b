/*
 * devices_test.c - the device list every front-end reads
 * (guest-lib/frontend/devices.c): "URI[#N][,URI[#N]...]".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "unit_check.h"

static void test_parse(void)
{
	struct pvgpu_device_entry *e;
	char long_uri[400];
	int n;

	n = pvgpu_devices_parse(" unix:///a.sock#1 ,, shm:///b ,tcp://[::1]:7100#0,"
				"vsock://2:7100#x,unix:///c#99999999", &e);
	CHECK(n == 4);
	if (n == 4) {
		CHECK(!strcmp(e[0].uri, "unix:///a.sock") && e[0].index == 1);
		CHECK(!strcmp(e[1].uri, "shm:///b") && e[1].index == -1);
		CHECK(!strcmp(e[2].uri, "tcp://[::1]:7100") && e[2].index == 0);
		/* "#x" is no index: part of the URI. */
		CHECK(!strcmp(e[3].uri, "vsock://2:7100#x") && e[3].index == -1);
	}
	free(e);

	CHECK(pvgpu_devices_parse("", &e) == 0);
	free(e);
	CHECK(pvgpu_devices_parse(" , ,", &e) == 0);
	free(e);

	/* A URI too long for a backend's name is ignored, not cut short. */
	memset(long_uri, 'a', sizeof(long_uri) - 1);
	long_uri[sizeof(long_uri) - 1] = '\0';
	memcpy(long_uri, "unix:///", 8);
	n = pvgpu_devices_parse(long_uri, &e);
	CHECK(n == 0);
	free(e);
}

static void test_gpus(void)
{
	struct pvgpu_device_entry all = { "unix:///s", -1 }, one = { "unix:///s", 2 };
	int first, end;

	pvgpu_device_entry_gpus(&all, 3, &first, &end);
	CHECK(first == 0 && end == 3);
	pvgpu_device_entry_gpus(&one, 3, &first, &end);
	CHECK(first == 2 && end == 3);
	pvgpu_device_entry_gpus(&one, 2, &first, &end);
	CHECK(first == end);
}

int main(void)
{
	test_parse();
	test_gpus();
	return UNIT_REPORT();
}
