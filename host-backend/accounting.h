/*
 * accounting.h - per-session figures shared between the supervisor and its
 * workers.
 *
 * The supervisor maps one table (MAP_SHARED) before it forks anything; each
 * worker writes only its own slot, with atomics, and the supervisor reads
 * them for the session-end log line, for status, and to free a slot when
 * its worker is gone however it ended.  Nothing a worker writes here is
 * trusted for anything but reporting and the sim device's capacity.
 */
#ifndef PVGPU_ACCOUNTING_H
#define PVGPU_ACCOUNTING_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define PVGPU_MAX_DEVICES	16

struct pvgpu_slot {
	/* Written by the supervisor before fork, read-only afterwards. */
	pid_t pid;			/* 0: slot is free */
	uint64_t session_id;
	char identity[128];
	struct timespec started;	/* CLOCK_MONOTONIC */

	/* Written by the worker. */
	_Atomic uint64_t calls;
	_Atomic uint64_t bytes_h2d;
	_Atomic uint64_t bytes_d2h;
	_Atomic uint64_t mem_used[PVGPU_MAX_DEVICES];
};

struct pvgpu_accounting {
	uint32_t nslots;
	struct pvgpu_slot slots[];
};

struct pvgpu_accounting *pvgpu_accounting_create(uint32_t nslots);
void pvgpu_accounting_destroy(struct pvgpu_accounting *acct);

/* A free slot, or NULL when every slot is taken. */
struct pvgpu_slot *pvgpu_accounting_claim(struct pvgpu_accounting *acct);
struct pvgpu_slot *pvgpu_accounting_by_pid(struct pvgpu_accounting *acct,
					   pid_t pid);
void pvgpu_accounting_release(struct pvgpu_slot *slot);

/* Device memory on `dev` held by every live session. */
uint64_t pvgpu_accounting_mem_used(struct pvgpu_accounting *acct, int dev);

#endif /* PVGPU_ACCOUNTING_H */
