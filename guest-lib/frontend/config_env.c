/* config_env.c - see config_env.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_env.h"
#include "guestconf.h"
#include "debug.h"
#include "size.h"

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* A size within [min, max] into *out; else a debug line, *out unchanged. */
static void env_size(const char *name, uint64_t min, uint64_t max,
		     uint64_t *out)
{
	const char *s = env(name);
	uint64_t v;

	if (!s)
		return;
	if (pvgpu_parse_size(s, &v) || v < min || v > max) {
		pvgpu_debug("ignoring %s=%s", name, s);
		return;
	}
	*out = v;
}

/* Microseconds, at most max_us, into *out_ns; else a debug line. */
static void env_us(const char *name, unsigned long max_us, uint64_t *out_ns)
{
	const char *s = env(name);
	char *end;
	unsigned long us;

	if (!s)
		return;
	errno = 0;
	us = strtoul(s, &end, 10);
	if (errno || *end || end == s || us > max_us || *s == '-') {
		pvgpu_debug("ignoring %s=%s", name, s);
		return;
	}
	*out_ns = (uint64_t)us * 1000;
}

static void env_string(const char *name, char *out, size_t outlen)
{
	const char *s = env(name);

	if (!s)
		return;
	if (strlen(s) >= outlen) {
		pvgpu_debug("ignoring %s: longer than %zu bytes", name, outlen - 1);
		return;
	}
	memcpy(out, s, strlen(s) + 1);
}

void pvgpu_config_from_env(struct pvgpu_client_config *cfg)
{
	const char *s;
	uint64_t v;

	pvgpu_client_config_init(cfg);
	/* First, so that what follows may say what it ignored. */
	s = env("PVGPU_DEBUG");
	cfg->debug = s && strcmp(s, "0");
	pvgpu_debug_enable(cfg->debug);

	/* PVGPU_DEVICES, else the installed guest's /etc/pvgpu/guest.conf,
	 * else the default the config starts with. */
	s = env("PVGPU_DEVICES");
	if (s && *s) {
		env_string("PVGPU_DEVICES", cfg->devices, sizeof(cfg->devices));
	} else {
		char *conf = pvgpu_guestconf_devices(NULL);

		if (conf && strlen(conf) < sizeof(cfg->devices))
			memcpy(cfg->devices, conf, strlen(conf) + 1);
		else if (conf)
			pvgpu_debug("ignoring guest.conf: its list is longer than %zu bytes",
				    sizeof(cfg->devices) - 1);
		free(conf);
	}
	env_string("PVGPU_TOKEN", cfg->token, sizeof(cfg->token));
	env_string("PVGPU_WINDOW_DEVICE", cfg->window_device,
		   sizeof(cfg->window_device));

	v = 0;
	env_size("PVGPU_BLOCK_SIZE", 1, UINT32_MAX, &v);
	cfg->block_size = (uint32_t)v;

	env_us("PVGPU_POLL_US", 100000, &cfg->poll_ns);
	env_us("PVGPU_WAIT_SPIN_US", 1000000, &cfg->wait_spin_ns);

	s = env("PVGPU_RING");
	if (s)
		cfg->ring = strcmp(s, "0") != 0;

	s = env("PVGPU_RING_BATCH");
	if (s)
		cfg->ring_batch = strcmp(s, "0") != 0;

	s = env("PVGPU_COPY_THREADS");
	if (s) {
		char *end;
		unsigned long n;

		errno = 0;
		n = strtoul(s, &end, 10);
		if (errno || *end || end == s || n < 1 || n > 8)
			pvgpu_debug("ignoring PVGPU_COPY_THREADS=%s (1 to 8)", s);
		else
			cfg->copy_threads = (unsigned int)n;
	}

	env_size("PVGPU_WINDOW_SIZE", 64ull << 20, 64ull << 30, &cfg->window_size);
	v = cfg->staging_slot;
	env_size("PVGPU_STAGING_SLOT", 64u << 10, 64u << 20, &v);
	cfg->staging_slot = (uint32_t)v;
	v = cfg->staging_slots;
	env_size("PVGPU_STAGING_SLOTS", 2, 64, &v);
	cfg->staging_slots = (uint32_t)v;

	/* Act like an older guest (tests of interoperation). */
	s = env("PVGPU_WITHHOLD_FEATURES");
	if (s) {
		char *end;

		errno = 0;
		v = strtoull(s, &end, 0);
		if (errno || *end || end == s)
			pvgpu_debug("ignoring PVGPU_WITHHOLD_FEATURES=%s", s);
		else
			cfg->withheld_features = v;
	}
}
