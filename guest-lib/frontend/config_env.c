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

/*
 * A decimal number within [min, max] into *out: 1; unset, 0; else a debug
 * line and 0, *out unchanged.
 */
static int env_ulong(const char *name, unsigned long min, unsigned long max,
		     unsigned long *out)
{
	const char *s = env(name);
	char *end;
	unsigned long n;

	if (!s)
		return 0;
	errno = 0;
	n = strtoul(s, &end, 10);
	if (errno || *end || end == s || *s == '-' || n < min || n > max) {
		pvgpu_debug("ignoring %s=%s (%lu to %lu)", name, s, min, max);
		return 0;
	}
	*out = n;
	return 1;
}

/* Microseconds, at most max_us, into *out_ns; else a debug line. */
static void env_us(const char *name, unsigned long max_us, uint64_t *out_ns)
{
	unsigned long us = 0;

	if (env_ulong(name, 0, max_us, &us))
		*out_ns = (uint64_t)us * 1000;
}

/* A flag: "0" turns it off, any other value on; unset or empty, *out stays. */
static void env_flag(const char *name, int *out)
{
	const char *s = env(name);

	if (s)
		*out = strcmp(s, "0") != 0;
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
	unsigned long n;
	uint64_t v;

	pvgpu_client_config_init(cfg);
	/* First, so that what follows may say what it ignored. */
	env_flag("PVGPU_DEBUG", &cfg->debug);
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

	env_flag("PVGPU_RING", &cfg->ring);
	env_flag("PVGPU_RING_BATCH", &cfg->ring_batch);
	env_flag("PVGPU_SIGNAL", &cfg->signal);

	if (env_ulong("PVGPU_COPY_THREADS", 1, 8, &n))
		cfg->copy_threads = (unsigned int)n;

	env_size("PVGPU_WINDOW_SIZE", 64ull << 20, 64ull << 30, &cfg->window_size);
	env_flag("PVGPU_WINDOW_HUGEPAGES", &cfg->window_hugepages);
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
