/*
 * supervisor.h - pvgpud's parent process: listens, learns who is calling
 * from the channel (or, where the channel cannot say, from the hello it
 * reads itself: unidentified.h), forks one worker per session, reaps
 * them, and logs one line when each session starts and ends.
 */
#ifndef PVGPU_SUPERVISOR_H
#define PVGPU_SUPERVISOR_H

#include <poll.h>

#include "accounting.h"
#include "admin.h"
#include "host.h"
#include "metrics.h"
#include "mps.h"
#include "policy.h"
#include "reattach.h"
#include "registry.h"
#include "stats.h"
#include "suspend.h"
#include "gpusched.h"
#include "unidentified.h"
#include "session.h"

#define PVGPU_MAX_LISTENERS	16

struct pvgpu_supervisor {
	struct pvgpu_listener listeners[PVGPU_MAX_LISTENERS];
	int nlisteners;
	/* Callers who name themselves in their hello, until they have. */
	struct pvgpu_unidentified unid;
	/* Refusals a caller can repeat at will: lines a second apart, per source. */
	struct pvgpu_saysources refused;
	struct pollfd *pfd;		/* what the event loop polls */
	const char *tcp_token;		/* --tcp-token; NULL: any */
	int sigfd;			/* signalfd: TERM, INT, HUP, CHLD */
	int timerfd;			/* the call watchdog's tick; -1: none */
	int ticking;			/* it is set to tick */
	uint64_t call_timeout_ms;	/* --call-timeout; 0: no limit */
	uint8_t *wd_killed;		/* per slot: the watchdog killed it */
	uint64_t *wd_busy_ns;		/* per slot: a tick last saw a call run */
	/*
	 * Per slot: its worker is reaped, but a device's scheduler lock was
	 * busy (a worker holds it, perhaps stopped in it), so the slot stays
	 * taken, with no session in it, until a tick of the watchdog's timer
	 * finds the lock free (pvgpu_sched_slot_gone); ngone of them, and
	 * what the supervisor saw of each device lock's holder.
	 */
	uint8_t *gone;
	unsigned int ngone;
	struct pvgpu_shlock_watch gone_watch[PVGPU_MAX_DEVICES];
	struct pvgpu_accounting *acct;
	struct pvgpu_sched *sched;	/* shared with the workers, like acct */
	struct pvgpu_worker_config wcfg;
	const char *config;		/* policy file; NULL: everyone, no quota */
	struct pvgpu_policy *policy;	/* in force; NULL without config */
	unsigned int flag_remotes;	/* --remote given: the policy's [remote] is not used */
	int flag_remote_token;		/* --remote-token given */
	const char *registry_dir;	/* --registry DIR; NULL: no VMs */
	struct pvgpu_registry *registry;	/* in force; NULL without it */
	int inotify_fd;			/* watches registry_dir; -1: none */
	/* One per vhost-user VM of the registry: its forwarded vsock. */
	struct pvgpu_listener vm_listeners[PVGPU_REGISTRY_MAX];
	int nvm_listeners;
	uint64_t next_session;
	int stopping;
	struct pvgpu_stats stats;	/* per-VM totals and rates */
	struct pvgpu_mps mps;		/* MPS control daemons ([gpu N] sharing = mps) */
	struct pvgpu_metrics *metrics;	/* --metrics server; NULL: none */
	struct timespec next_tick;	/* when the rates are taken next */
	/*
	 * Per slot: the listener (index in listeners[], -1: none) whose
	 * done() hears of the session's end, and its cookie.
	 */
	struct pvgpu_owed {
		int listener;
		uint64_t cookie;
	} *owed;
	struct pvgpu_admin admin;	/* --admin socket; fd -1: none */
	struct pvgpu_suspend suspend;	/* checkpointers at work */
	struct pvgpu_reattach *reattach;	/* per slot: resume tokens (reattach.h) */
};

struct pvgpu_supervisor_config {
	const char *const *listen;	/* URIs */
	int nlisten;
	const struct pvgpu_executor_ops *exec;
	uint32_t block;
	uint32_t max_sessions;
	uint32_t max_unidentified;	/* connections waiting for their hello */
	uint64_t hello_timeout_ms;	/* how long each may wait */
	const char *tcp_token;
	const char *module_cache;	/* directory; NULL: no cross-session cache */
	uint64_t module_cache_max;	/* its bytes in all */
	uint32_t poll_us;		/* workers' busy-poll before sleeping */
	uint32_t wait_spin_us;		/* their watch of a call waiting on the device */
	uint64_t call_timeout_ms;	/* watchdog limit on one call; 0: none */
	uint32_t sched_quantum_us;	/* GPU turn per unit of weight; 0: no turns */
	const char *config;		/* --config FILE, or NULL */
	const char *registry;		/* --registry DIR, or NULL */
	const char *metrics;		/* --metrics ADDR:PORT, or NULL */
	const char *const *remotes;	/* --remote URIs (remote executor) */
	unsigned int nremotes;		/* 0: the policy's [remote], if any */
	const char *remote_token;	/* --remote-token; NULL: the policy's */
	const char *admin;		/* --admin PATH; NULL: the default */
	uint64_t suspend_timeout_ms;	/* a checkpointer's deadline */
};

/* 0, or -1 after logging why (the caller exits 1). */
int pvgpu_supervisor_init(struct pvgpu_supervisor *sv,
			  const struct pvgpu_supervisor_config *cfg);
/* Serve until SIGTERM/SIGINT; returns the process exit code. */
int pvgpu_supervisor_run(struct pvgpu_supervisor *sv);
/* First thing in a child the supervisor forked (supervisor.c says why). */
void pvgpu_supervisor_child(pid_t parent, const char *log_prefix);
void pvgpu_supervisor_fini(struct pvgpu_supervisor *sv);
/* Hand the metrics server fresh figures; a no-op without --metrics. */
void pvgpu_supervisor_publish(struct pvgpu_supervisor *sv);
/* "1.5 GiB", "12.0 MiB", "512 B": for log lines. */
void pvgpu_human_bytes(uint64_t n, char *out, size_t len);

#endif /* PVGPU_SUPERVISOR_H */
