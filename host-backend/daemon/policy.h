/*
 * policy.h - the per-VM policy file (pvgpud --config FILE), DESIGN §5.
 *
 * An INI file, read with inih:
 *
 *   [default]
 *   policy = refuse          ; refuse | allow callers no [vm] section names
 *   memory = 2G              ; quota of the pool allowed unknown callers share
 *   max_sessions = 8         ; sessions of that pool at once
 *   pinned = 64M             ; host pinned memory of that pool
 *   ipc_handles = 32         ; IPC exports that pool may hold at once
 *   module_cache = 256M      ; module-cache bytes of that pool
 *   handles = 65536          ; live handles each session of it may hold
 *   exclusive_wait = 10s     ; for every VM that does not set its own
 *   call_timeout = 300s      ; for every VM that does not set its own
 *   idle_timeout = 30m       ; for every VM that does not set its own
 *
 *   [vm alice]
 *   uid = 1000, 1001         ; Unix callers with these uids (SO_PEERCRED)
 *   cid = 5                  ; vsock peers with these CIDs
 *   token = s3cret           ; TCP callers presenting this token in hello
 *   addresses = 10.0.0.5     ; ... and only from these source addresses
 *   memory = 8G              ; device-memory quota across all its sessions
 *   max_sessions = 4         ; concurrent sessions
 *   pinned = 64M             ; host pinned memory (staging) across its sessions
 *   ipc_handles = 32         ; IPC exports its sessions may hold at once
 *   module_cache = 256M      ; its directory of the module cache (disk)
 *   handles = 65536          ; live handles each of its sessions may hold
 *   gpus = 0,1               ; device indices it may create contexts on
 *   mode = shared            ; shared | exclusive
 *   exclusive_wait = 10s     ; a context refused for exclusivity waits this long
 *   call_timeout = 300s      ; watchdog limit on one call (0: none)
 *   idle_timeout = 30m       ; end a session silent this long (0: never)
 *   weight = 2               ; share of GPU time under contention (gpusched.h)
 *   priority = latency       ; latency | normal: turns ahead of virtual time (gpusched.h)
 *   mps_threads = 50         ; MPS only: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1..100
 *   mps_pinned_memory = 8G   ; MPS only: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
 *
 *   [gpu 0]
 *   sharing = mps            ; time | mps: how VMs share device 0 (mps.h)
 *   oversubscribe = 1.5      ; 1.0..8.0: suspend idle sessions to make room (oversub.h)
 *
 * Sizes take a K, M, G or T suffix (powers of 1024); durations are decimal
 * seconds, or take ms, s or m, and one that is not 0 is at least what
 * keeps it: 250ms for call_timeout and idle_timeout (the watchdog's
 * tick), 1ms for exclusive_wait.  A missing memory, pinned or
 * max_sessions means no limit; missing gpus means every device.
 *
 * The file is refused, with its line, where it cannot mean one thing: a
 * section given twice, a VM name longer than 46 characters (the INI
 * reader, inih, keeps 49 bytes of a section's name and would cut two
 * names into one), a line longer than inih reads whole, a byte no text
 * has, and a file with no section at all (empty, a directory).
 *
 * Identities come from the channel only: uid and cid are what the kernel
 * says about the peer, and a token is the one thing a TCP caller can
 * prove.  A uid, cid or token may name one VM only.  addresses (IPv4 or
 * IPv6, up to 16) binds the VM's token to the source addresses a network
 * channel (tcp://, verbs://) reports: a caller presenting the token from
 * any other address is refused.
 *
 * memory counts device allocations and, for each loaded module, its image
 * size: the driver does not say what a module takes, and the image bounds
 * its code (not __device__ arrays it declares without initialisers).
 * pinned counts the page-locked staging buffers a session's worker takes
 * for copies over a stream transport, apart from device memory: it is the
 * host's RAM, not the GPU's.  A shared window's pages are the VM's own
 * memory and are not counted.
 *
 * mode = exclusive: the unit of exclusivity is a context.  While a session
 * of an exclusive VM holds a context on a GPU, context creation there by
 * any other VM fails with CUDA_ERROR_DEVICE_UNAVAILABLE
 * (cudaErrorDevicesUnavailable), and an exclusive VM cannot create a
 * context on a GPU where another VM holds one.  Sessions of one VM never
 * exclude each other, and a session that holds no context (it has only
 * said hello, or queried devices) excludes nobody.  With exclusive_wait,
 * the refused caller (of either kind) waits up to that long, polling, and
 * then gets the same error; the default is 0, refuse at once.  The check
 * is made under one lock in the shared table, so two workers can never
 * both take a GPU.  A reload that changes a mode applies to contexts made
 * from then on; contexts already held are never taken away.
 *
 * call_timeout overrides pvgpud --call-timeout for the VM (watchdog.h).
 * idle_timeout (default 0: never) ends a session of the VM whose guest has
 * sent nothing for that long while no call of it runs, so that a guest
 * that went quiet, or a stopped worker, gives its slot and quota back
 * (watchdog.h).
 *
 * resume_grace (default 10s; 0: off) is how long a session whose guest's
 * connection dropped (not bye) waits, holding everything it had, for the
 * guest to come back with the resume token its hello was given
 * (host-backend/session/reattach.c); past it the session ends as any.
 *
 * ipc_handles (1..256, default 32) bounds the entries of the daemon's IPC
 * table (accounting.h) the VM's live sessions hold: cuIpcGetMemHandle,
 * cuIpcGetEventHandle and cuMemExportToShareableHandle past it fail with
 * CUDA_ERROR_OUT_OF_MEMORY for that VM alone.  The table has 256 entries
 * in all, so the default leaves room for several VMs at once.
 *
 * module_cache (a size, default 256M; 0: none) bounds the bytes the VM's
 * images take in the module cache (host-backend/session/modcache.h), a
 * bound of its own: disk, not device memory, and not charged to memory.
 *
 * handles (1..16777215, default 65536) bounds the live handles of each
 * session: contexts, streams, events, modules and their functions,
 * graphs, their nodes and executable graphs, arrays, textures and
 * surfaces, links, VMM memory and reservations.  Creation past it fails
 * with CUDA_ERROR_OUT_OF_MEMORY in that session alone.  It is a bound
 * per session (times max_sessions, per VM) because what a handle costs,
 * the worker's memory and the driver's, is the session's process's.
 *
 * priority, mps_threads and mps_pinned_memory are taken in [default] too
 * (for the pool of unknown callers).  mps_threads defaults to 100 and
 * mps_pinned_memory to the VM's memory quota (none where it has none).
 * An MPS client process reaches one MPS server, whose GPU it sees as
 * device 0 (mps.h): a VM whose GPUs include a GPU of sharing = mps must
 * therefore name that GPU alone in gpus, and the file is refused, at the
 * VM's section, where one does not ([default] only where it allows
 * unknown callers).
 *
 * Several GPUs: gpus holds for peers too.  A session holds contexts and
 * memory only on its VM's GPUs, every peer copy and peer-access request
 * names the session's own contexts and allocations, and peer queries
 * answer "no access" where either device is outside gpus (session/peer.c).
 * Exclusivity is per GPU (the context on each), the quota spans all the
 * VM's GPUs, and scheduler turns are taken per GPU (gpusched.h).
 */
#ifndef PVGPU_POLICY_H
#define PVGPU_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accounting.h"		/* PVGPU_MAX_DEVICES */
#include "executor.h"		/* PVGPU_MAX_REMOTES */
#include "identity.h"
#include "vm.h"		/* PVGPU_VM_NAME_LEN */

#define PVGPU_POLICY_MAX_VMS	64
#define PVGPU_POLICY_MAX_IDS	16
#define PVGPU_TOKEN_LEN		128
#define PVGPU_MAX_EXCLUSIVE_WAIT_MS	(3600 * 1000)
#define PVGPU_MAX_CALL_TIMEOUT_MS	(86400 * 1000)
#define PVGPU_MAX_IDLE_TIMEOUT_MS	(30ll * 86400 * 1000)
/* resume_grace: the default, and at most an hour (a session held idle). */
#define PVGPU_RESUME_GRACE_MS		10000
#define PVGPU_MAX_RESUME_GRACE_MS	(3600ll * 1000)
#define PVGPU_OVERSUB_MAX_MILLI		8000	/* oversubscribe = 8.0 */

/* The pool of allowed unknown callers is a VM by this name. */
#define PVGPU_DEFAULT_VM	"default"

enum pvgpu_vm_mode { VM_SHARED, VM_EXCLUSIVE };

struct pvgpu_vm_policy {
	char name[PVGPU_VM_NAME_LEN];
	/*
	 * Who this VM is: uid = and cid = lists, a token = (none: a caller
	 * identified by token cannot be this VM), each as an identity.
	 */
	struct pvgpu_identity ids[2 * PVGPU_POLICY_MAX_IDS + 1];
	unsigned int nids;
	/* addresses = ..., as inet_ntop writes them; none: any address. */
	char addrs[PVGPU_POLICY_MAX_IDS][46];
	unsigned int naddrs;
	uint64_t memory;		/* bytes; 0: no quota */
	uint32_t max_sessions;		/* 0: no limit */
	uint32_t gpus;			/* bit per device index; 0: all */
	uint64_t pinned;		/* host pinned bytes; 0: no limit */
	uint32_t ipc_handles;		/* IPC exports held at once, 1..PVGPU_MAX_IPC */
	uint64_t module_cache;		/* module-cache bytes; 0: none kept */
	uint32_t handles;		/* live handles per session, 1..PVGPU_HANDLES_MAX */
	enum pvgpu_vm_mode mode;
	int64_t exclusive_wait_ms;	/* -1: not set, no wait */
	int64_t call_timeout_ms;	/* -1: pvgpud --call-timeout */
	int64_t idle_timeout_ms;	/* -1: not set, never */
	int64_t resume_grace_ms;	/* -1: not set, PVGPU_RESUME_GRACE_MS */
	uint32_t weight;		/* 1..1000000, default 1 */
	int latency;			/* priority = latency (gpusched.h) */
	uint32_t mps_threads;		/* 1..100, default 100 */
	uint64_t mps_pinned_memory;	/* bytes; 0: its memory quota, if any */
	int line;			/* where its section began (messages) */
	int entry;			/* its index in the shared VM table */
};

struct pvgpu_policy {
	/* [remote] node = URI, in order: the remote executor's nodes. */
	char remote_uri[PVGPU_MAX_REMOTES][256];
	const char *remotes[PVGPU_MAX_REMOTES];	/* -> remote_uri */
	unsigned int nremotes;
	char remote_token[257];		/* [remote] token = ...; "": none */
	int allow_unknown;		/* [default] policy = allow */
	struct pvgpu_vm_policy unknown;	/* quota of allowed unknown callers */
	struct pvgpu_vm_policy vms[PVGPU_POLICY_MAX_VMS];
	unsigned int nvms;
	uint32_t mps_gpus;		/* [gpu N] sharing = mps: bit N */
	/* [gpu N] oversubscribe, in thousandths; 1000: off (oversub.h). */
	uint32_t oversub_milli[PVGPU_MAX_DEVICES];
	/*
	 * [gpu N] memory: the bytes of device N pvgpud promises its VMs,
	 * the rest left to the host's own programs; 0: the whole device.
	 * Allocations past it are out of memory as on a full GPU, so
	 * oversubscription makes room below it (oversub.h).
	 */
	uint64_t mem_cap[PVGPU_MAX_DEVICES];
};

/* Parse path into p; on failure -1 and one line (with the line number) in err. */
int pvgpu_policy_load(const char *path, struct pvgpu_policy *p,
		      char *err, size_t errlen);

/* The [vm] that names this identity, or NULL. */
const struct pvgpu_vm_policy *pvgpu_policy_lookup(const struct pvgpu_policy *p,
						  const struct pvgpu_identity *id);
/* Non-zero when vm lists no addresses or lists addr ("" never matches). */
int pvgpu_policy_addr_ok(const struct pvgpu_vm_policy *vm, const char *addr);
const struct pvgpu_vm_policy *pvgpu_policy_by_name(const struct pvgpu_policy *p,
						   const char *name);
/*
 * How long a session of the VM at index vm of the shared VM table
 * outlives its connection (resume_grace), in ms; 0: not at all.  p may be
 * NULL (no policy file: the default).
 */
int64_t pvgpu_policy_resume_grace_ms(const struct pvgpu_policy *p, int32_t vm);

#endif /* PVGPU_POLICY_H */
