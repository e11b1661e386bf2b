/*
 * mps.h - a GPU shared by MPS ([gpu N] sharing = mps in the policy).
 *
 * Per GPU of sharing = mps, the supervisor runs one MPS control daemon,
 * `nvidia-cuda-mps-control -f`, looked up on PATH, as its own child, with
 * CUDA_VISIBLE_DEVICES=N and CUDA_MPS_PIPE_DIRECTORY and
 * CUDA_MPS_LOG_DIRECTORY in a directory of its own (mode 0700): one made
 * with mkdtemp under $RUNTIME_DIRECTORY (systemd's RuntimeDirectory=),
 * else $TMPDIR, else /tmp, named pvgpud-mps.XXXXXX, gpuN/pipe and
 * gpuN/log in it.  It is started when the policy that asks for it is put
 * in force, before any worker is forked for that policy.  -f (foreground)
 * rather than -d: a daemon that forks itself away is not the supervisor's
 * child, and could be watched only by guessing its pid.  The supervisor
 * watches it like a worker (SIGCHLD): one log line when it starts, one
 * when it dies, and it is started again after a backoff (0.5 s, doubling
 * to 60 s while it keeps dying within a minute of its start).  On
 * shutdown, after the workers (its clients) are gone, `echo quit |
 * nvidia-cuda-mps-control` is run with the same environment, and the
 * daemon and that command get PVGPU_MPS_STOP_MS between them before
 * both are killed: the supervisor never waits on MPS without a deadline.
 *
 * A worker whose VM uses an MPS GPU gets, before its executor opens the
 * device, CUDA_MPS_PIPE_DIRECTORY of that GPU's daemon,
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (the VM's mps_threads) and
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=NNNM" (its mps_pinned_memory, else
 * its memory quota, in MiB; device 0 because the client sees only the
 * server's GPU, which CUDA_VISIBLE_DEVICES made its device 0).  The
 * policy refuses a VM of an MPS GPU that may use any other GPU
 * (policy.h), so one daemon is always the right one.
 *
 * A reload that makes a GPU mps starts its daemon; one that makes it
 * time again stops giving new sessions the MPS environment, and leaves
 * the daemon (whose clients may be live sessions) until pvgpud stops.
 * mps_threads and mps_pinned_memory are read when a worker starts, so a
 * reload changes them for sessions that start after it.
 * The scheduler's weighted turns (gpusched.h) stay on top of MPS.
 */
#ifndef PVGPU_MPS_H
#define PVGPU_MPS_H

#include <stdint.h>
#include <sys/types.h>

#include "accounting.h"		/* PVGPU_MAX_DEVICES */
#include "policy.h"

#define PVGPU_MPS_CONTROL	"nvidia-cuda-mps-control"
#define PVGPU_MPS_STOP_MS	5000
#define PVGPU_MPS_BACKOFF_MS	500
#define PVGPU_MPS_BACKOFF_MAX_MS 60000

struct pvgpu_mps {
	int enabled;			/* the executor uses this host's GPUs */
	int stopping;			/* shutting down: no more restarts */
	uint32_t wanted;		/* bit N: GPU N shares by mps now */
	char dir[1024];			/* the run directory; "": not made yet */
	struct pvgpu_mps_gpu {
		char pipe[1024 + 32];		/* "": never started */
		char log[1024 + 32];
		pid_t pid;			/* its control daemon; 0: none */
		uint64_t due_ns;		/* when to start it again; 0: not due */
		uint64_t started_ns;
		uint32_t backoff_ms;
		unsigned int starts;
	} gpu[PVGPU_MAX_DEVICES];
};

/* GPUs of sharing = mps from now on: start the daemons not running. */
void pvgpu_mps_want(struct pvgpu_mps *m, uint32_t gpus);
/* A child was reaped: 1 if it was a control daemon (then handled). */
int pvgpu_mps_reaped(struct pvgpu_mps *m, pid_t pid, int status);
/* Start again the daemons whose backoff is over. */
void pvgpu_mps_tick(struct pvgpu_mps *m);
/* Milliseconds until the next restart is due; -1: none. */
int pvgpu_mps_timeout_ms(const struct pvgpu_mps *m);
/* Shutdown: quit each daemon, bounded, then kill what is left. */
void pvgpu_mps_stop(struct pvgpu_mps *m);

/*
 * Worker side, before the executor opens: the MPS client environment of
 * the VM vm (NULL: none) when one of its GPUs is in mps_gpus; pipes[N]
 * is GPU N's pipe directory ("" or NULL: no daemon).
 */
void pvgpu_mps_client_env(const struct pvgpu_vm_policy *vm, uint32_t mps_gpus,
			  const char *const pipes[PVGPU_MAX_DEVICES]);

#endif /* PVGPU_MPS_H */
