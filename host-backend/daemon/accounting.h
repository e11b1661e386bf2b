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

#include "executor.h"
#include "shlock.h"

#define PVGPU_MAX_DEVICES	16
/* The VMs of the policy file, plus the pool of allowed unknown callers. */
#define PVGPU_MAX_VM_ENTRIES	65

/*
 * One VM as the workers see it.  The supervisor fills an entry when a VM
 * first appears in the policy and rewrites its limits on every reload; an
 * entry is never reused for another name, so a live session's VM stays what
 * it was even when a reload drops it from the file.
 */
struct pvgpu_vm_entry {
	char name[64];			/* "": entry unused */
	_Atomic uint64_t quota;		/* bytes; 0: no quota */
	_Atomic uint32_t max_sessions;	/* 0: no limit */
	_Atomic uint32_t gpus;		/* bit per device; 0: all */
	_Atomic uint32_t exclusive;	/* mode = exclusive (exclusive.h) */
	_Atomic uint32_t exclusive_wait_ms;	/* how long its ctx_create waits */
	_Atomic uint64_t pinned_quota;	/* host pinned bytes; 0: no limit */
	/* IPC exports its live sessions may hold at once (ipc_handles). */
	_Atomic uint32_t ipc_max;
	/* Bytes of its directory of the module cache (module_cache, modcache.h). */
	_Atomic uint64_t modcache_max;
	/* Live handles each of its sessions may hold (handles, handles.h). */
	_Atomic uint32_t handles_max;
	/*
	 * Serialises "count, then take" of the quotas (memory, pinned) across
	 * the VM's workers.  Admission needs no lock (pvgpu_admit says why).
	 */
	struct pvgpu_shlock lock;
};

struct pvgpu_slot {
	/* Written by the supervisor before fork, read-only afterwards. */
	/*
	 * 0: free.  -1: taken with no worker: one being forked, or one
	 * reaped whose slot the scheduler's table still names (supervisor.c).
	 */
	pid_t pid;
	uint64_t session_id;
	char identity[128];
	struct timespec started;	/* CLOCK_MONOTONIC */

	/*
	 * Index into vms[], or -1 without a policy.  The supervisor sets it
	 * before fork (admit.h): from the channel, or for a TCP caller from
	 * the token of the hello it read.
	 */
	_Atomic int32_t vm;

	/* Written by the worker. */
	_Atomic uint64_t calls;
	_Atomic uint64_t bytes_h2d;
	_Atomic uint64_t bytes_d2h;
	_Atomic uint64_t mem_used[PVGPU_MAX_DEVICES];
	/* Charged to the VM's quota, not yet allocated (see charge below). */
	_Atomic uint64_t mem_pending;
	/* Page-locked host memory the worker holds for it (staging). */
	_Atomic uint64_t host_pinned;
	/*
	 * Bit per device on which the session holds a context.  Set only
	 * under gpu_lock, after the exclusivity check (exclusive.h); cleared
	 * when its last context there goes, or with the slot.
	 */
	_Atomic uint32_t gpus_held;
	/*
	 * The call being served, for the supervisor's watchdog (watchdog.h):
	 * CLOCK_MONOTONIC ns when it began, less time spent waiting on the
	 * guest; 0: none.  call_opcode is for the log line only.
	 */
	_Atomic uint64_t call_started_ns;
	_Atomic uint32_t call_opcode;
	/*
	 * For the idle watchdog (policy idle_timeout): CLOCK_MONOTONIC ns
	 * when the worker last heard from the guest (a request, or inside
	 * a call the guest's data); older than started when it has not yet.
	 */
	_Atomic uint64_t guest_seen_ns;
	/*
	 * GPU time of the session's kernels, ns: the wall time it had work
	 * in flight, shared equally with the other sessions that had work on
	 * the device at the same moment (gpusched.h).  Any process may add to it.
	 */
	_Atomic uint64_t gpu_ns;
	/* The pid the guest gave at hello (its own namespace's), for NVML's process list: reporting only. */
	_Atomic uint32_t guest_pid;
	/*
	 * Suspend and resume (suspend.h): an enum pvgpu_slot_state the
	 * supervisor alone writes, and a futex word the worker sleeps on
	 * while it waits for a resume.  While it says suspended the
	 * session's mem_used is on the host: not the device's, still the
	 * VM's quota's.
	 */
	_Atomic uint32_t state;
	/*
	 * The worker's "a call is waiting: resume me", with a write to the
	 * supervisor's wake eventfd; the supervisor clears it and trusts
	 * it for nothing else.
	 */
	_Atomic uint32_t resume_wanted;
	/*
	 * Oversubscription (oversub.h).  room_bytes: the worker's "make
	 * room for this many bytes on device room_dev" (0: nothing asked),
	 * with a write to the wake eventfd; the supervisor answers by
	 * clearing it and bumping room_seq, a futex word the worker sleeps
	 * on.  resumed_ns: when the supervisor last resumed the session
	 * (CLOCK_MONOTONIC), so that it is not suspended again at once.
	 */
	_Atomic uint64_t room_bytes;
	_Atomic uint32_t room_dev;
	_Atomic uint32_t room_seq;
	_Atomic uint64_t resumed_ns;
	/*
	 * A session whose guest's connection dropped (reattach.h): an enum
	 * pvgpu_detach the worker sets to DETACHED while it waits for its
	 * guest, the supervisor moves to HANDED when it sends a resuming
	 * connection, and the worker back to ATTACHED (or GONE, past its
	 * grace).  The token is never here: only supervisor and worker hold it.
	 */
	_Atomic uint32_t detached;
};

enum pvgpu_detach {
	PVGPU_ATTACHED = 0,
	PVGPU_DETACHED,			/* the worker waits for its guest */
	PVGPU_HANDED,			/* the supervisor sent it a connection */
	PVGPU_DETACH_GONE,		/* past its grace: ending */
};

enum pvgpu_slot_state {
	PVGPU_SLOT_RUNNING = 0,
	PVGPU_SLOT_SUSPENDING,		/* a checkpointer is at work */
	PVGPU_SLOT_SUSPENDED,		/* its device memory is on the host */
	PVGPU_SLOT_RESUMING,		/* a checkpointer restores it */
};

/*
 * One allocation exported with cuIpcGetMemHandle, event with
 * cuIpcGetEventHandle or physical memory with cuMemExportToShareableHandle
 * (ipc_registry.c): the driver's handle, the VM and
 * session that exported it, and the token the guest was given instead.
 * An entry whose session has ended is free.
 *
 * The table is the whole daemon's, so each VM may hold at most its
 * ipc_handles of it (PVGPU_IPC_PER_VM unless the policy says otherwise):
 * the defaults of seven VMs together leave room for an eighth.
 */
#define PVGPU_MAX_IPC		256
#define PVGPU_IPC_PER_VM	(PVGPU_MAX_IPC / 8)
#define PVGPU_IPC_TOKEN		16
struct pvgpu_ipc_entry {
	uint64_t session_id;		/* 0: unused */
	uint32_t slot;			/* the exporting session's, to see it live */
	int32_t vm;
	uint32_t kind;			/* enum pvgpu_ipc_kind */
	uint8_t token[PVGPU_IPC_TOKEN];
	uint8_t handle[64];
	uint64_t size;
};

struct pvgpu_accounting {
	uint32_t nslots;
	/* Serialises "check, then take" of gpus_held across workers. */
	struct pvgpu_shlock gpu_lock;
	/* The IPC registry, under ipc_lock. */
	struct pvgpu_shlock ipc_lock;
	struct pvgpu_ipc_entry ipc[PVGPU_MAX_IPC];
	struct pvgpu_vm_entry vms[PVGPU_MAX_VM_ENTRIES];
	/*
	 * What a context and a stream take of each device's memory, as the
	 * start-up probe measured them (executor.h pvgpu_exec_device): charged to
	 * the VM's quota for each a session makes.  Written by the supervisor
	 * before it forks any worker, read-only afterwards.
	 */
	uint64_t ctx_bytes[PVGPU_MAX_DEVICES];
	uint64_t stream_bytes[PVGPU_MAX_DEVICES];
	struct pvgpu_slot slots[];
};

struct pvgpu_accounting *pvgpu_accounting_create(uint32_t nslots);

/* The IPC registry (ipc_registry.c).  put: enter the driver's handle of an
 * allocation of size bytes (or an event: size 0) exported by slot's
 * session; the token for the guest in token.  0, -EDQUOT when the VM's
 * live sessions hold its ipc_handles already, -ENOSPC when the daemon's
 * table is full, -EIO without randomness.  get: the handle and size
 * behind a token of that kind exported by a live session of the same VM
 * as slot's.  0, or -1 (not found). */
int pvgpu_ipc_put(struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		  enum pvgpu_ipc_kind kind, const uint8_t handle[64], uint64_t size,
		  uint8_t token[PVGPU_IPC_TOKEN]);
int pvgpu_ipc_get(struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		  enum pvgpu_ipc_kind kind, const uint8_t token[PVGPU_IPC_TOKEN],
		  uint8_t handle[64], uint64_t *size);
void pvgpu_accounting_destroy(struct pvgpu_accounting *acct);

/* A free slot, or NULL when every slot is taken. */
struct pvgpu_slot *pvgpu_accounting_claim(struct pvgpu_accounting *acct);
struct pvgpu_slot *pvgpu_accounting_by_pid(struct pvgpu_accounting *acct,
					   pid_t pid);
void pvgpu_accounting_release(struct pvgpu_slot *slot);

/* Device memory on `dev` held by every live session not suspended. */
uint64_t pvgpu_accounting_mem_used(struct pvgpu_accounting *acct, int dev);

/* The entry for a VM name, made if need be: its index, or -1 when full. */
int pvgpu_accounting_vm_get(struct pvgpu_accounting *acct, const char *name);
/*
 * Its live sessions (exact in the supervisor, which alone starts and ends
 * them), and the memory charged to it (exact under its lock).
 */
uint32_t pvgpu_accounting_vm_sessions(struct pvgpu_accounting *acct, int vm);
uint64_t pvgpu_accounting_vm_mem_used(struct pvgpu_accounting *acct, int vm);
/* A slot's device memory, all devices; what a suspend moves to the host. */
uint64_t pvgpu_accounting_slot_mem(struct pvgpu_slot *slot);

/*
 * Before allocating size bytes: charge them to the slot's VM, as pending,
 * if that keeps the VM within its quota (0), else -1.  Counting and taking
 * happen under the VM's lock, so two workers of one VM cannot both take the
 * last bytes.  Afterwards exactly one of commit (allocated on dev) or
 * uncharge (the allocation failed).  A slot without a VM is never refused.
 */
int pvgpu_accounting_charge(struct pvgpu_accounting *acct,
			    struct pvgpu_slot *slot, uint64_t size);
void pvgpu_accounting_commit(struct pvgpu_slot *slot, int dev, uint64_t size);
void pvgpu_accounting_uncharge(struct pvgpu_slot *slot, uint64_t size);

/*
 * Page-locked host memory the worker takes for the session (its staging
 * buffers): counted apart from device memory, against the VM's pinned
 * quota (policy key `pinned`).  pin: 0, or -1 when over that quota.
 */
int pvgpu_accounting_pin(struct pvgpu_accounting *acct,
			 struct pvgpu_slot *slot, uint64_t size);
void pvgpu_accounting_unpin(struct pvgpu_slot *slot, uint64_t size);
/* Host pinned memory of all its sessions (exact under its lock). */
uint64_t pvgpu_accounting_vm_pinned(struct pvgpu_accounting *acct, int vm);

#endif /* PVGPU_ACCOUNTING_H */
