/* policy.c - reading the per-VM policy file (see policy.h). */
#include <ctype.h>
#include <errno.h>
#include <arpa/inet.h>
#ifndef PVGPU_NO_INIH
#include <ini.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "accounting.h"
#include "handles.h"
#include "modcache.h"
#include "policy.h"
#include "size.h"
#include "watchdog.h"

/*
 * inih keeps a section's name in a buffer of 50 bytes (MAX_SECTION in
 * ini.c; ini.h does not say it) and cuts a longer one short without a
 * word: two [vm NAME]s alike in their first 46 characters became one VM.
 * The file's lines are read here (read_line) and such a name refused; the
 * handler also compares the name it is given with the one read, should
 * an inih be built to keep fewer.
 */
#define INI_SECTION_MAX		50
#define VM_NAME_MAX		(INI_SECTION_MAX - 1 - 3)	/* "vm " NAME */
_Static_assert(VM_NAME_MAX < PVGPU_VM_NAME_LEN, "a VM name inih keeps fits");
/* + [default], [remote], [gpu N] */
#define MAX_SECTIONS		(PVGPU_POLICY_MAX_VMS + 2 + PVGPU_MAX_DEVICES)
#define STR_(x)			#x
#define STR(x)			STR_(x)

/*
 * What the inih callback needs: the policy being filled and why it failed
 * (the first failure, and its line); and what the line reader sees that
 * inih does not tell: the line, the sections so far, where each began.
 */
struct parse_state {
	struct pvgpu_policy *p;
	char why[256];
	int why_line;			/* 0: nothing failed */
	FILE *f;
	int line;			/* lines read */
	int key_seen;			/* a key since the last section: indented lines continue it */
	char section[INI_SECTION_MAX];	/* the one the lines are in */
	struct {
		char name[INI_SECTION_MAX];
		int line;
	} sections[MAX_SECTIONS];
	unsigned int nsections;
	int section_line;		/* where the section began */
	int mps_line[PVGPU_MAX_DEVICES];	/* where [gpu N] said mps */
};

static int fail(struct parse_state *st, const char *fmt, ...)
{
	va_list ap;

	/* inih reads on after a failure: the first one is what to say. */
	if (st->why_line)
		return 0;
	va_start(ap, fmt);
	vsnprintf(st->why, sizeof(st->why), fmt, ap);
	va_end(ap);
	st->why_line = st->line;
	return 0;	/* inih: stop here, report this line */
}

/*
 * A duration key: decimal, ms, s or m (pvgpu_parse_duration), at most
 * max_ms, and if not 0 at least min_ms, the finest what enforces it can
 * keep.  1 (the key was taken), or 0 after saying what is wrong.
 */
static int duration_key(struct parse_state *st, const char *key,
			const char *value, uint64_t min_ms, const char *resolution,
			uint64_t max_ms, const char *example, int64_t *out)
{
	uint64_t ms;

	switch (pvgpu_parse_duration(value, 1, min_ms, max_ms, &ms)) {
	case 0:
		*out = (int64_t)ms;
		return 1;
	case PVGPU_DURATION_SHORT:
		return fail(st, "%s = %s is under %s (0: none)", key, value,
			    resolution);
	default:
		return fail(st, "%s = %s is not a duration of 0..%llus (decimal, e.g. %s)",
			    key, value, (unsigned long long)(max_ms / 1000),
			    example);
	}
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (end == s || *end || errno || *s == '-' || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* A size key (K, M, G or T): 1 (taken), or 0 after saying what is wrong. */
static int size_key(struct parse_state *st, const char *key, const char *value,
		    const char *example, uint64_t *out)
{
	if (pvgpu_parse_size(value, out))
		return fail(st, "%s = %s is not a size (e.g. %s)", key, value,
			    example);
	return 1;
}

/* A count of 1..max: 1 (taken), or 0 after saying what is wrong. */
static int count_key(struct parse_state *st, const char *key, const char *value,
		     uint32_t max, uint32_t *out)
{
	if (parse_u32(value, max, out) || !*out)
		return fail(st, "%s = %s is not 1..%u", key, value, (unsigned int)max);
	return 1;
}

/*
 * "0, 1, 5": call add() for each number.  The list is copied because
 * strtok_r writes into it and inih's buffer is not ours.
 */
static int parse_list(const char *s, uint32_t max,
		      int (*add)(struct pvgpu_vm_policy *, uint32_t),
		      struct pvgpu_vm_policy *vm)
{
	char buf[512], *tok, *save;
	int n = 0;

	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint32_t v;

		tok += strspn(tok, " \t");
		tok[strcspn(tok, " \t")] = '\0';
		if (parse_u32(tok, max, &v) || add(vm, v))
			return -1;
		n++;
	}
	return n ? 0 : -1;
}

/* Up to PVGPU_POLICY_MAX_IDS of one kind per VM, as the file promises. */
static int add_id(struct pvgpu_vm_policy *vm, enum pvgpu_id_kind kind,
		  const char *value)
{
	unsigned int same = 0;

	for (unsigned int i = 0; i < vm->nids; i++)
		same += vm->ids[i].kind == kind;
	if (same == PVGPU_POLICY_MAX_IDS ||
	    vm->nids == sizeof(vm->ids) / sizeof(vm->ids[0]))
		return -1;
	return pvgpu_identity_set(&vm->ids[vm->nids++], kind, value);
}

static int add_numeric_id(struct pvgpu_vm_policy *vm, enum pvgpu_id_kind kind,
			  uint32_t v)
{
	char value[16];

	snprintf(value, sizeof(value), "%u", (unsigned int)v);
	return add_id(vm, kind, value);
}

static int add_uid(struct pvgpu_vm_policy *vm, uint32_t v)
{
	return add_numeric_id(vm, PVGPU_ID_UID, v);
}

static int add_cid(struct pvgpu_vm_policy *vm, uint32_t v)
{
	return add_numeric_id(vm, PVGPU_ID_CID, v);
}

/* "10.0.0.5, fd00::5": each kept as inet_ntop writes it; 0 or -1. */
static int parse_addresses(struct pvgpu_vm_policy *vm, const char *s)
{
	char buf[1024], *tok, *save;

	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned char bin[sizeof(struct in6_addr)];
		size_t n;
		int af;

		tok += strspn(tok, " \t");
		n = strcspn(tok, " \t");
		if (tok[n + strspn(tok + n, " \t")])
			return -1;	/* two words, no comma */
		tok[n] = '\0';
		af = strchr(tok, ':') ? AF_INET6 : AF_INET;
		if (vm->naddrs == PVGPU_POLICY_MAX_IDS || inet_pton(af, tok, bin) != 1 ||
		    !inet_ntop(af, bin, vm->addrs[vm->naddrs], sizeof(vm->addrs[0])))
			return -1;
		vm->naddrs++;
	}
	return vm->naddrs ? 0 : -1;
}

int pvgpu_policy_addr_ok(const struct pvgpu_vm_policy *vm, const char *addr)
{
	if (!vm->naddrs)
		return 1;
	for (unsigned int i = 0; i < vm->naddrs; i++)
		if (addr && *addr && !strcmp(vm->addrs[i], addr))
			return 1;
	return 0;
}

static int add_gpu(struct pvgpu_vm_policy *vm, uint32_t v)
{
	vm->gpus |= 1u << v;
	return 0;
}

/* The bounds a VM has where the file says nothing of them. */
static void policy_defaults(struct pvgpu_vm_policy *vm)
{
	vm->mps_threads = 100;
	vm->ipc_handles = PVGPU_IPC_PER_VM;
	vm->module_cache = PVGPU_MODCACHE_PER_VM;
	vm->handles = PVGPU_HANDLES_PER_SESSION;
}

static struct pvgpu_vm_policy *vm_section(struct parse_state *st,
					  const char *name)
{
	struct pvgpu_policy *p = st->p;
	struct pvgpu_vm_policy *vm;

	/* inih calls us per key, so a section is "opened" by its first key. */
	for (unsigned int i = 0; i < p->nvms; i++)
		if (!strcmp(p->vms[i].name, name))
			return &p->vms[i];
	if (!*name || strlen(name) > VM_NAME_MAX ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
		    strlen(name)) {
		fail(st, "VM name '%s' must be 1..%d of [A-Za-z0-9._-]", name,
		     VM_NAME_MAX);
		return NULL;
	}
	if (!strcmp(name, PVGPU_DEFAULT_VM)) {
		fail(st, "[vm %s] is reserved for unknown callers; use [default]",
		     name);
		return NULL;
	}
	if (p->nvms == PVGPU_POLICY_MAX_VMS) {
		fail(st, "more than %d VMs", PVGPU_POLICY_MAX_VMS);
		return NULL;
	}
	vm = &p->vms[p->nvms++];
	snprintf(vm->name, sizeof(vm->name), "%s", name);
	vm->line = st->section_line;
	vm->weight = 1;
	policy_defaults(vm);
	vm->exclusive_wait_ms = -1;
	vm->call_timeout_ms = -1;
	vm->idle_timeout_ms = -1;
	vm->resume_grace_ms = -1;
	return vm;
}

/* A limit the watchdog keeps: it looks once a tick. */
static int watchdog_key(struct parse_state *st, const char *key,
			const char *value, uint64_t max_ms, int64_t *out)
{
	return duration_key(st, key, value, PVGPU_WATCHDOG_TICK_MS,
			    "the watchdog's resolution of "
			    STR(PVGPU_WATCHDOG_TICK_MS) "ms",
			    max_ms, "300s, 0 for none", out);
}

/* Keys both [default] and [vm NAME] take. */
static int limit_key(struct parse_state *st, struct pvgpu_vm_policy *vm,
		     const char *key, const char *value)
{
	if (!strcmp(key, "memory"))
		return size_key(st, key, value, "8G", &vm->memory);
	if (!strcmp(key, "max_sessions")) {
		if (parse_u32(value, 65536, &vm->max_sessions))
			return fail(st, "max_sessions = %s is not 0..65536", value);
		return 1;
	}
	if (!strcmp(key, "pinned"))
		return size_key(st, key, value, "64M", &vm->pinned);
	if (!strcmp(key, "ipc_handles"))
		return count_key(st, key, value, PVGPU_MAX_IPC, &vm->ipc_handles);
	if (!strcmp(key, "module_cache"))
		return size_key(st, key, value, "256M; 0 keeps none",
				&vm->module_cache);
	if (!strcmp(key, "handles"))
		return count_key(st, key, value, PVGPU_HANDLES_MAX, &vm->handles);
	/* The wait is kept to the millisecond; the watchdog looks every tick. */
	if (!strcmp(key, "exclusive_wait"))
		return duration_key(st, key, value, 1, "the wait's resolution of 1ms",
				    PVGPU_MAX_EXCLUSIVE_WAIT_MS, "10s, 500ms",
				    &vm->exclusive_wait_ms);
	if (!strcmp(key, "call_timeout"))
		return watchdog_key(st, key, value, PVGPU_MAX_CALL_TIMEOUT_MS,
				    &vm->call_timeout_ms);
	if (!strcmp(key, "idle_timeout"))
		return watchdog_key(st, key, value, PVGPU_MAX_IDLE_TIMEOUT_MS,
				    &vm->idle_timeout_ms);
	/* A detached session's wait for its guest (resume.h); 0: none. */
	if (!strcmp(key, "resume_grace"))
		return duration_key(st, key, value, 100, "100ms",
				    PVGPU_MAX_RESUME_GRACE_MS, "10s, 2.5",
				    &vm->resume_grace_ms);
	if (!strcmp(key, "priority")) {
		if (!strcmp(value, "latency"))
			vm->latency = 1;
		else if (!strcmp(value, "normal"))
			vm->latency = 0;
		else
			return fail(st, "priority = %s: want latency or normal", value);
		return 1;
	}
	if (!strcmp(key, "mps_threads"))
		return count_key(st, key, value, 100, &vm->mps_threads);
	if (!strcmp(key, "mps_pinned_memory")) {
		if (pvgpu_parse_size(value, &vm->mps_pinned_memory) ||
		    vm->mps_pinned_memory < (1ull << 20))
			return fail(st, "mps_pinned_memory = %s is not a size of 1M or more (e.g. 8G)",
				    value);
		return 1;
	}
	return -1;
}

static int vm_key(struct parse_state *st, struct pvgpu_vm_policy *vm,
		  const char *key, const char *value)
{
	int rc = limit_key(st, vm, key, value);

	if (rc >= 0)
		return rc;
	if (!strcmp(key, "uid")) {
		if (parse_list(value, UINT32_MAX - 1, add_uid, vm))
			return fail(st, "uid = %s: want up to %d uids, comma-separated",
				    value, PVGPU_POLICY_MAX_IDS);
	} else if (!strcmp(key, "cid")) {
		if (parse_list(value, UINT32_MAX - 1, add_cid, vm))
			return fail(st, "cid = %s: want up to %d CIDs, comma-separated",
				    value, PVGPU_POLICY_MAX_IDS);
	} else if (!strcmp(key, "token")) {
		if (!*value || strlen(value) >= PVGPU_TOKEN_LEN)
			return fail(st, "token must be 1..%d characters",
				    PVGPU_TOKEN_LEN - 1);
		for (unsigned int i = 0; i < vm->nids; i++)
			if (vm->ids[i].kind == PVGPU_ID_TOKEN)
				return fail(st, "token given twice");
		if (add_id(vm, PVGPU_ID_TOKEN, value))
			return fail(st, "too many identities for one [vm]");
	} else if (!strcmp(key, "addresses")) {
		if (vm->naddrs || parse_addresses(vm, value))
			return fail(st, "addresses = %s: want up to %d IPv4 or IPv6 addresses, comma-separated, given once",
				    value, PVGPU_POLICY_MAX_IDS);
	} else if (!strcmp(key, "gpus")) {
		if (parse_list(value, PVGPU_MAX_DEVICES - 1, add_gpu, vm))
			return fail(st, "gpus = %s: want device indices 0..%d",
				    value, PVGPU_MAX_DEVICES - 1);
	} else if (!strcmp(key, "mode")) {
		if (!strcmp(value, "shared"))
			vm->mode = VM_SHARED;
		else if (!strcmp(value, "exclusive"))
			vm->mode = VM_EXCLUSIVE;
		else
			return fail(st, "mode must be shared or exclusive");
	} else if (!strcmp(key, "weight")) {
		if (parse_u32(value, 1000000, &vm->weight) || !vm->weight)
			return fail(st, "weight must be 1..1000000");
	} else {
		return fail(st, "unknown key '%s' in [vm %s]", key, vm->name);
	}
	return 1;
}

/*
 * oversubscribe = FACTOR: a decimal 1..8 with at most three places, kept
 * in thousandths so that a reload compares and prints it exactly.
 */
static int oversub_key(struct parse_state *st, uint32_t n, const char *value)
{
	const char *s = value;
	uint32_t milli = 0;
	int places = -1;

	for (; *s; s++) {
		if (*s == '.' && places < 0 && s != value) {
			places = 0;
			continue;
		}
		if (*s < '0' || *s > '9' || places >= 3 ||
		    milli > PVGPU_OVERSUB_MAX_MILLI * 10)
			goto err;
		milli = milli * 10 + (uint32_t)(*s - '0');
		if (places >= 0)
			places++;
	}
	if (s == value || places == 0)
		goto err;
	for (places = places < 0 ? 0 : places; places < 3; places++)
		milli *= 10;
	if (milli < 1000 || milli > PVGPU_OVERSUB_MAX_MILLI)
		goto err;
	st->p->oversub_milli[n] = milli;
	return 1;
err:
	return fail(st, "oversubscribe = %s: want a factor from 1.0 to %u.0 (1.0: off)",
		    value, PVGPU_OVERSUB_MAX_MILLI / 1000);
}

/*
 * [gpu N]: how VMs share device N.  N is written as a plain decimal, so
 * that [gpu 0] and [gpu 00] cannot be one GPU given twice.
 */
static int gpu_key(struct parse_state *st, const char *num, const char *key,
		   const char *value)
{
	char canon[16];
	uint32_t n;

	if (!parse_u32(num, UINT32_MAX, &n))
		snprintf(canon, sizeof(canon), "%u", (unsigned int)n);
	else
		canon[0] = '\0';
	if (strcmp(canon, num) || n >= PVGPU_MAX_DEVICES)
		return fail(st, "[gpu %s]: want a device index 0..%d", num,
			    PVGPU_MAX_DEVICES - 1);
	if (!strcmp(key, "oversubscribe"))
		return oversub_key(st, n, value);
	if (!strcmp(key, "memory")) {
		/* Under a megabyte no context fits: a typo, not a choice. */
		if (pvgpu_parse_size(value, &st->p->mem_cap[n]) ||
		    st->p->mem_cap[n] < (1ull << 20))
			return fail(st, "memory = %s is not a size of 1M or more (e.g. 80G)",
				    value);
		return 1;
	}
	if (strcmp(key, "sharing"))
		return fail(st, "unknown key '%s' in [gpu %u] (want sharing = time|mps, oversubscribe = FACTOR or memory = SIZE)",
			    key, (unsigned int)n);
	if (!strcmp(value, "mps")) {
		st->p->mps_gpus |= 1u << n;
		st->mps_line[n] = st->line;
	} else if (!strcmp(value, "time")) {
		st->p->mps_gpus &= ~(1u << n);
	} else {
		return fail(st, "sharing = %s: want time or mps", value);
	}
	return 1;
}

static int on_key(void *user, const char *section, const char *key,
		  const char *value)
{
	struct parse_state *st = user;
	struct pvgpu_vm_policy *vm;
	int rc;

	/* Not the name the line said: inih cut it (see INI_SECTION_MAX). */
	if (strcmp(section, st->section))
		return fail(st, "section [%s...] is longer than the INI reader keeps (%zu bytes)",
			    section, strlen(section));
	if (!strcmp(section, "default")) {
		st->p->unknown.line = st->section_line;
		rc = limit_key(st, &st->p->unknown, key, value);
		if (rc >= 0)
			return rc;
		if (strcmp(key, "policy"))
			return fail(st, "unknown key '%s' in [default]", key);
		if (!strcmp(value, "allow"))
			st->p->allow_unknown = 1;
		else if (!strcmp(value, "refuse"))
			st->p->allow_unknown = 0;
		else
			return fail(st, "policy must be refuse or allow");
		return 1;
	}
	if (!strcmp(section, "remote")) {
		struct pvgpu_policy *p = st->p;

		if (!strcmp(key, "token")) {
			if (!*value || strlen(value) >= sizeof(p->remote_token))
				return fail(st, "token must be 1..%zu bytes",
					    sizeof(p->remote_token) - 1);
			snprintf(p->remote_token, sizeof(p->remote_token), "%s", value);
			return 1;
		}
		if (strcmp(key, "node"))
			return fail(st, "unknown key '%s' in [remote] (want node = URI or token = TOKEN)", key);
		if (!strstr(value, "://") || strlen(value) >= sizeof(p->remote_uri[0]))
			return fail(st, "node must be a URI (verbs://, tcp://, unix://) under %zu bytes",
				    sizeof(p->remote_uri[0]));
		if (p->nremotes == PVGPU_MAX_REMOTES)
			return fail(st, "more than %d remote nodes", PVGPU_MAX_REMOTES);
		snprintf(p->remote_uri[p->nremotes], sizeof(p->remote_uri[0]), "%s", value);
		p->remotes[p->nremotes] = p->remote_uri[p->nremotes];
		p->nremotes++;
		return 1;
	}
	if (!strncmp(section, "gpu ", 4))
		return gpu_key(st, section + 4, key, value);
	if (strncmp(section, "vm ", 3))
		return fail(st, "unknown section [%s] (want [default], [remote], [gpu N] or [vm NAME])",
			    section);
	vm = vm_section(st, section + 3 + strspn(section + 3, " "));
	return vm ? vm_key(st, vm, key, value) : 0;
}

/* One caller, one VM: an identity named twice would make the answer depend on order. */
static int check_unique(const struct pvgpu_policy *p, char *err, size_t errlen)
{
	for (unsigned int i = 0; i < p->nvms; i++) {
		const struct pvgpu_vm_policy *a = &p->vms[i];

		for (unsigned int j = 0; j < a->nids; j++) {
			const struct pvgpu_identity *id = &a->ids[j];
			const struct pvgpu_vm_policy *b = pvgpu_policy_lookup(p, id);

			if (b == a)
				continue;
			if (id->kind == PVGPU_ID_TOKEN)	/* a secret: never logged */
				snprintf(err, errlen, "[vm %s] has the token of another VM",
					 a->name);
			else
				snprintf(err, errlen, "%s %s is in [vm %s] and [vm %s]",
					 pvgpu_id_kind_name(id->kind), id->value,
					 b->name, a->name);
			return -1;
		}
	}
	return 0;
}

/*
 * A VM of an MPS GPU names it alone in gpus: an MPS client process
 * reaches one MPS server, and the server of each GPU sees that GPU only
 * (mps.h).  0, or -1 with file:line in err.
 */
static int check_mps_vm(const struct pvgpu_policy *p,
			const struct pvgpu_vm_policy *vm, const char *path,
			const int *mps_line, char *err, size_t errlen)
{
	uint32_t both = p->mps_gpus & (vm->gpus ? vm->gpus : UINT32_MAX);
	int gpu = __builtin_ctz(both ? both : 1);

	if (!both || vm->gpus == both)
		return 0;
	snprintf(err, errlen, "%s:%d: [%s%s] may use GPU %d, which shares by mps (line %d): its gpus must name that GPU alone (an MPS client reaches one MPS server)",
		 path, vm->line, vm == &p->unknown ? "" : "vm ",
		 vm->name, gpu, mps_line[gpu]);
	return -1;
}

static int check_mps(const struct pvgpu_policy *p, const char *path,
		     const int *mps_line, char *err, size_t errlen)
{
	if (p->allow_unknown &&
	    check_mps_vm(p, &p->unknown, path, mps_line, err, errlen))
		return -1;
	for (unsigned int i = 0; i < p->nvms; i++)
		if (check_mps_vm(p, &p->vms[i], path, mps_line, err, errlen))
			return -1;
	return 0;
}

#ifndef PVGPU_NO_INIH
/*
 * A section line as inih reads it ("[name]", blanks around, a comment
 * after): its name into st->section, once per file, and short enough for
 * inih to keep whole.  0, or -1 after failing.
 */
static int section_line(struct parse_state *st, const char *p)
{
	const char *end = p + 1, *vm;
	int blank = 0;
	size_t n;

	/* inih's find_chars_or_comment: "]", or a ";" after a blank. */
	for (; *end && *end != ']' && !(blank && *end == ';'); end++)
		blank = isspace((unsigned char)*end);
	if (*end != ']')
		return 0;	/* inih says: a syntax error */
	n = (size_t)(end - p - 1);
	if (n >= INI_SECTION_MAX) {
		if (!strncmp(p + 1, "vm ", 3))
			fail(st, "[%.*s...]: a VM name has at most %d characters (the INI reader keeps %d bytes of a section's name)",
			     20, p + 1, VM_NAME_MAX, INI_SECTION_MAX - 1);
		else
			fail(st, "[%.*s...]: a section's name has at most %d bytes (what the INI reader keeps)",
			     20, p + 1, INI_SECTION_MAX - 1);
		return -1;
	}
	memcpy(st->section, p + 1, n);
	st->section[n] = '\0';
	st->section_line = st->line;
	st->key_seen = 0;
	/* [vm  a] is [vm a] (on_key skips the blanks): one VM either way. */
	vm = !strncmp(st->section, "vm ", 3) ? st->section + 3 + strspn(st->section + 3, " ") : NULL;
	for (unsigned int i = 0; i < st->nsections; i++) {
		const char *seen = st->sections[i].name;

		if (vm ? (!strncmp(seen, "vm ", 3) &&
			  !strcmp(seen + 3 + strspn(seen + 3, " "), vm)) :
			 !strcmp(seen, st->section)) {
			fail(st, "[%s] again (first at line %d): each section is given once",
			     st->section, st->sections[i].line);
			return -1;
		}
	}
	if (st->nsections == MAX_SECTIONS) {
		fail(st, "more than %d sections (%d VMs, [default] and [remote])",
		     MAX_SECTIONS, PVGPU_POLICY_MAX_VMS);
		return -1;
	}
	memcpy(st->sections[st->nsections].name, st->section, n + 1);
	st->sections[st->nsections++].line = st->line;
	return 0;
}

/*
 * inih's reader (fgets' contract): one line of the file into str, num
 * bytes at most with its NUL.  It stops inih (NULL) at the first failure,
 * at a byte no text file has (a binary file named by mistake), at a line
 * longer than inih reads whole (it would take the rest as a line of its
 * own), and at a section named twice or too long for inih.
 */
static char *read_line(char *str, int num, void *stream)
{
	struct parse_state *st = stream;
	size_t n = 0, len;
	const char *p;
	int c = 0;

	if (st->why_line || num < 4)
		return NULL;
	while (n < (size_t)num - 1 && c != '\n' && (c = getc(st->f)) != EOF) {
		if (n == 0)
			st->line++;
		if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) {
			fail(st, "byte 0x%02x: a policy file is text", c);
			return NULL;
		}
		str[n++] = (char)c;
	}
	if (!n)
		return NULL;
	str[n] = '\0';
	/* Cut short, a line ends in neither: too long as well. */
	len = n - (str[n - 1] == '\n') - (n > 1 && str[n - 2] == '\r');
	if (len > (size_t)num - 3) {
		fail(st, "longer than the %d bytes a line the INI reader takes",
		     num - 3);
		return NULL;
	}
	p = str;
	if (st->line == 1 && !strncmp(p, "\xef\xbb\xbf", 3))
		p += 3;			/* a UTF-8 BOM, which inih skips */
	while (isspace((unsigned char)*p))
		p++;
	if (p > str && st->key_seen && *p)
		return str;		/* a value's continuation (inih's multiline) */
	if (*p == '[') {
		if (section_line(st, p))
			return NULL;
	} else if (*p && *p != ';' && *p != '#') {
		st->key_seen = 1;
	}
	return str;
}
#endif

int pvgpu_policy_load(const char *path, struct pvgpu_policy *p,
		      char *err, size_t errlen)
{
	struct parse_state st = { .p = p };
	int line;

	memset(p, 0, sizeof(*p));
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		p->oversub_milli[d] = 1000;
	snprintf(p->unknown.name, sizeof(p->unknown.name), "%s", PVGPU_DEFAULT_VM);
	p->unknown.weight = 1;
	policy_defaults(&p->unknown);
	p->unknown.exclusive_wait_ms = -1;
	p->unknown.call_timeout_ms = -1;
	p->unknown.idle_timeout_ms = -1;
	p->unknown.resume_grace_ms = -1;
#ifdef PVGPU_NO_INIH
	/*
	 * A GPU host with no package registry may lack libinih-dev: pvgpud
	 * still builds and serves, but says plainly that it cannot read a
	 * policy file rather than run without one.
	 */
	(void)st;
	(void)line;
	(void)on_key;
	(void)check_unique;
	(void)check_mps;
	snprintf(err, errlen,
		 "cannot read %s: this pvgpud was built without inih (libinih-dev)",
		 path);
	return -1;
#else
	struct stat sb;

	st.f = fopen(path, "r");
	if (!st.f) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(st.f), &sb)) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		goto err_file;
	}
	/* A directory reads as an empty file: zero VMs, and no word said. */
	if (!S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s is %s, not a policy file", path,
			 S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
		goto err_file;
	}
	line = ini_parse_stream(read_line, &st, on_key, &st);
	if (ferror(st.f)) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		goto err_file;
	}
	/* The first of inih's syntax errors and our refusals. */
	if (line > 0 && (!st.why_line || line < st.why_line)) {
		snprintf(err, errlen, "%s:%d: syntax error (want [SECTION] or KEY = VALUE)",
			 path, line);
		goto err_file;
	}
	if (st.why_line) {
		snprintf(err, errlen, "%s:%d: %s", path, st.why_line, st.why);
		goto err_file;
	}
	if (line < 0) {
		snprintf(err, errlen, "cannot read %s: out of memory", path);
		goto err_file;
	}
	/* An empty policy would refuse everyone, and say nothing of why. */
	if (!st.nsections) {
		snprintf(err, errlen, "%s has no sections: want [default], [remote] or [vm NAME] (policy.h)",
			 path);
		goto err_file;
	}
	fclose(st.f);
	if (check_unique(p, err, errlen) ||
	    check_mps(p, path, st.mps_line, err, errlen))
		return -1;
	/* What [default] says about waiting, call and idle time holds for every VM that says nothing. */
	for (unsigned int i = 0; i < p->nvms; i++) {
		if (p->vms[i].exclusive_wait_ms < 0)
			p->vms[i].exclusive_wait_ms = p->unknown.exclusive_wait_ms;
		if (p->vms[i].call_timeout_ms < 0)
			p->vms[i].call_timeout_ms = p->unknown.call_timeout_ms;
		if (p->vms[i].idle_timeout_ms < 0)
			p->vms[i].idle_timeout_ms = p->unknown.idle_timeout_ms;
		if (p->vms[i].resume_grace_ms < 0)
			p->vms[i].resume_grace_ms = p->unknown.resume_grace_ms;
	}
	return 0;

err_file:
	fclose(st.f);
	return -1;
#endif
}

const struct pvgpu_vm_policy *pvgpu_policy_lookup(const struct pvgpu_policy *p,
						  const struct pvgpu_identity *id)
{
	const struct pvgpu_vm_policy *found = NULL;

	if (id->kind == PVGPU_ID_NONE || !id->value[0])
		return NULL;
	/*
	 * Every entry is compared, the first match kept: how long this takes
	 * says nothing about which secret came close.
	 */
	for (unsigned int i = 0; i < p->nvms; i++)
		for (unsigned int j = 0; j < p->vms[i].nids; j++)
			if (pvgpu_identity_equal(&p->vms[i].ids[j], id) && !found)
				found = &p->vms[i];
	return found;
}

const struct pvgpu_vm_policy *pvgpu_policy_by_name(const struct pvgpu_policy *p,
						   const char *name)
{
	for (unsigned int i = 0; i < p->nvms; i++)
		if (!strcmp(p->vms[i].name, name))
			return &p->vms[i];
	return NULL;
}

int64_t pvgpu_policy_resume_grace_ms(const struct pvgpu_policy *p, int32_t vm)
{
	int64_t ms = -1;

	if (p) {
		ms = p->unknown.resume_grace_ms;
		for (unsigned int i = 0; i < p->nvms; i++)
			if (p->vms[i].entry == vm)
				ms = p->vms[i].resume_grace_ms;
	}
	return ms >= 0 ? ms : PVGPU_RESUME_GRACE_MS;
}
