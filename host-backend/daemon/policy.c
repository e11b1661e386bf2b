/* policy.c - reading the per-VM policy file (see policy.h). */
#include <errno.h>
#include <arpa/inet.h>
#ifndef PVGPU_NO_INIH
#include <ini.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accounting.h"
#include "policy.h"
#include "size.h"

/* What the inih callback needs: the policy being filled and why it failed. */
struct parse_state {
	struct pvgpu_policy *p;
	char why[256];
};

static int fail(struct parse_state *st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->why, sizeof(st->why), fmt, ap);
	va_end(ap);
	return 0;	/* inih: stop here, report this line */
}

/*
 * "10", "10s", "1.5s", "500ms", "2m": milliseconds, at most max_ms.  A
 * bare number is seconds, as in every other duration pvgpud takes.
 */
static int parse_duration(const char *s, int64_t max_ms, int64_t *out)
{
	double v, scale = 1000.0;
	char *end;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || *s == '-' || v != v)
		return -1;
	if (!strcmp(end, "ms"))
		scale = 1.0;
	else if (!strcmp(end, "m"))
		scale = 60000.0;
	else if (*end && strcmp(end, "s"))
		return -1;
	v *= scale;
	if (v < 0 || v > (double)max_ms)
		return -1;
	*out = (int64_t)(v + 0.5);
	return 0;
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

static struct pvgpu_vm_policy *vm_section(struct parse_state *st,
					  const char *name)
{
	struct pvgpu_policy *p = st->p;
	struct pvgpu_vm_policy *vm;

	/* inih calls us per key, so a section is "opened" by its first key. */
	for (unsigned int i = 0; i < p->nvms; i++)
		if (!strcmp(p->vms[i].name, name))
			return &p->vms[i];
	if (!*name || strlen(name) >= PVGPU_VM_NAME_LEN ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
		    strlen(name)) {
		fail(st, "VM name '%s' must be 1..%d of [A-Za-z0-9._-]", name,
		     PVGPU_VM_NAME_LEN - 1);
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
	vm->weight = 1;
	vm->ipc_handles = PVGPU_IPC_PER_VM;
	vm->exclusive_wait_ms = -1;
	vm->call_timeout_ms = -1;
	return vm;
}

/* Keys both [default] and [vm NAME] take. */
static int limit_key(struct parse_state *st, struct pvgpu_vm_policy *vm,
		     const char *key, const char *value)
{
	if (!strcmp(key, "memory")) {
		if (pvgpu_parse_size(value, &vm->memory))
			return fail(st, "memory = %s is not a size (e.g. 8G)", value);
		return 1;
	}
	if (!strcmp(key, "max_sessions")) {
		if (parse_u32(value, 65536, &vm->max_sessions))
			return fail(st, "max_sessions = %s is not 0..65536", value);
		return 1;
	}
	if (!strcmp(key, "pinned")) {
		if (pvgpu_parse_size(value, &vm->pinned))
			return fail(st, "pinned = %s is not a size (e.g. 64M)", value);
		return 1;
	}
	if (!strcmp(key, "ipc_handles")) {
		if (parse_u32(value, PVGPU_MAX_IPC, &vm->ipc_handles) ||
		    !vm->ipc_handles)
			return fail(st, "ipc_handles = %s is not 1..%d", value,
				    PVGPU_MAX_IPC);
		return 1;
	}
	if (!strcmp(key, "exclusive_wait")) {
		if (parse_duration(value, PVGPU_MAX_EXCLUSIVE_WAIT_MS,
				   &vm->exclusive_wait_ms))
			return fail(st, "exclusive_wait = %s is not a duration of 0..%ds (e.g. 10s, 500ms)",
				    value, PVGPU_MAX_EXCLUSIVE_WAIT_MS / 1000);
		return 1;
	}
	if (!strcmp(key, "call_timeout")) {
		if (parse_duration(value, PVGPU_MAX_CALL_TIMEOUT_MS,
				   &vm->call_timeout_ms))
			return fail(st, "call_timeout = %s is not a duration of 0..%ds (e.g. 300s, 0 for none)",
				    value, PVGPU_MAX_CALL_TIMEOUT_MS / 1000);
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

static int on_key(void *user, const char *section, const char *key,
		  const char *value)
{
	struct parse_state *st = user;
	struct pvgpu_vm_policy *vm;
	int rc;

	if (!strcmp(section, "default")) {
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
	if (strncmp(section, "vm ", 3))
		return fail(st, "unknown section [%s] (want [default], [remote] or [vm NAME])",
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

int pvgpu_policy_load(const char *path, struct pvgpu_policy *p,
		      char *err, size_t errlen)
{
	struct parse_state st = { .p = p };
	int line;

	memset(p, 0, sizeof(*p));
	snprintf(p->unknown.name, sizeof(p->unknown.name), "%s", PVGPU_DEFAULT_VM);
	p->unknown.weight = 1;
	p->unknown.ipc_handles = PVGPU_IPC_PER_VM;
	p->unknown.exclusive_wait_ms = -1;
	p->unknown.call_timeout_ms = -1;
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
	(void)parse_duration;
	snprintf(err, errlen,
		 "cannot read %s: this pvgpud was built without inih (libinih-dev)",
		 path);
	return -1;
#else
	line = ini_parse(path, on_key, &st);
	if (line < 0) {
		snprintf(err, errlen, "cannot read %s", path);
		return -1;
	}
	if (line > 0) {
		snprintf(err, errlen, "%s:%d: %s", path, line,
			 st.why[0] ? st.why : "syntax error");
		return -1;
	}
	if (check_unique(p, err, errlen))
		return -1;
	/* What [default] says about waiting and call time holds for every VM that says nothing. */
	for (unsigned int i = 0; i < p->nvms; i++) {
		if (p->vms[i].exclusive_wait_ms < 0)
			p->vms[i].exclusive_wait_ms = p->unknown.exclusive_wait_ms;
		if (p->vms[i].call_timeout_ms < 0)
			p->vms[i].call_timeout_ms = p->unknown.call_timeout_ms;
	}
	return 0;
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

