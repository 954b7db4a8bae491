/*
 * shared_lease.c - the shared tier's decisions (shared_lease.h, which has the
 * protocol): health and runs, pure. shared.c and shared_read.c send the
 * requests and hold the lock.
 */
#include "shared_lease.h"
#include "mcfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void shared_health_init(struct shared_health *h, uint64_t now)
{
	memset(h, 0, sizeof(*h));
	h->state = SHARED_UP;
	h->since_ns = now;
}

enum shared_ticket shared_health_ask(struct shared_health *h, enum shared_op op, uint64_t now)
{
	if (h->state == SHARED_UP || (h->state == SHARED_READ_ONLY && op == SHARED_OP_READ))
		return SHARED_T_GO;
	/* a read probes a down service; a write probes one that refuses writes */
	if ((h->state == SHARED_DOWN) != (op == SHARED_OP_READ))
		return SHARED_T_NONE;
	if (h->probing || now < h->probe_ns)
		return SHARED_T_NONE;
	h->probing = true;
	return SHARED_T_PROBE;
}

static bool become(struct shared_health *h, enum shared_state s, uint64_t now)
{
	if (h->state == s)
		return false;
	h->state = s;
	h->since_ns = now;
	h->probe_ns = now + SHARED_RETRY_NS;
	return true;
}

bool shared_health_tell(struct shared_health *h, enum shared_ticket t, enum shared_op op,
			enum shared_outcome o, uint64_t now)
{
	if (t == SHARED_T_NONE)
		return false;
	if (t == SHARED_T_PROBE) {
		h->probing = false;
		h->probe_ns = now + SHARED_RETRY_NS;
		if (o == SHARED_O_OK)
			return become(h, SHARED_UP, now);
	}
	if (o == SHARED_O_DOWN)
		return become(h, SHARED_DOWN, now);
	if (o == SHARED_O_REFUSED && op == SHARED_OP_WRITE && h->state == SHARED_UP)
		return become(h, SHARED_READ_ONLY, now);
	return false;
}

enum shared_outcome shared_outcome(enum shared_op op, int rc, long status, bool busy, bool quiet,
				   bool unanswered, uint64_t silent_ns, uint64_t timeout_ns)
{
	if (rc == 0 || rc == -ENOENT || rc == -EBADMSG)
		return SHARED_O_OK;
	if (busy || unanswered) /* answering others, or storing a block slowly */
		return SHARED_O_BUSY;
	if (quiet)
		return silent_ns >= 2 * timeout_ns ? SHARED_O_DOWN : SHARED_O_BUSY;
	if (status < 200 || (status >= 500 && status != 507))
		return SHARED_O_DOWN;
	/* an answer that refuses: writes (full, read-only) or, for reads, the tier */
	return op == SHARED_OP_WRITE ? SHARED_O_REFUSED : SHARED_O_DOWN;
}

/* ---- leases ------------------------------------------------------------- */

#define WORDS (SHARED_RUN_MAX / 64)

int shared_lease_parse(const char *body, size_t n, struct shared_lease *out)
{
	char buf[SHARED_LEASE_MAX], hex[SHARED_RUN_MAX / 4 + 1], state[16] = "";
	size_t len, i;

	memset(out, 0, sizeof(*out));
	if (n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, body, n);
	buf[n] = '\0';
	if (sscanf(buf, "%95s %64s %15s", out->node, hex, state) < 2)
		return -EINVAL;
	len = strlen(hex);
	for (i = 0; i < len; i++) { /* the last digit holds blocks 0-3 */
		char c = hex[len - 1 - i];
		unsigned v = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
						    : 16;

		if (v == 16)
			return -EINVAL;
		out->bits[i / 16] |= (uint64_t)v << (4 * (i % 16));
	}
	if (state[0] && strcmp(state, "released") != 0)
		return -EINVAL;
	out->released = state[0] != '\0';
	return 0;
}

size_t shared_lease_format(const struct shared_lease *l, char *out)
{
	char hex[SHARED_RUN_MAX / 4 + 1];
	int w, top = 0, n;
	char *p = hex;

	for (w = WORDS - 1; w > 0 && !l->bits[w]; w--)
		;
	top = w;
	p += sprintf(p, "%llx", (unsigned long long)l->bits[top]);
	for (w = top - 1; w >= 0; w--)
		p += sprintf(p, "%016llx", (unsigned long long)l->bits[w]);
	n = snprintf(out, SHARED_LEASE_MAX, "%s %s%s\n", l->node, hex,
		     l->released ? " released" : "");
	return n < 0 ? 0 : (size_t)n < SHARED_LEASE_MAX ? (size_t)n : SHARED_LEASE_MAX - 1;
}

uint64_t shared_lease_age(int64_t date_ns, int64_t modified_ns)
{
	if (date_ns <= 0 || modified_ns <= 0)
		return UINT64_MAX;
	/* a lease written "after" the answer's Date: the seconds' rounding */
	return date_ns > modified_ns ? (uint64_t)(date_ns - modified_ns) : 0;
}

/* Older than @bound_ns, with a second for the service's rounding? */
static bool too_old(uint64_t age_ns, uint64_t bound_ns)
{
	return age_ns != UINT64_MAX && age_ns > bound_ns + 1000000000ull;
}

int shared_lease_holder(int rc, const struct shared_lease *l, uint64_t age_ns, const char *self,
			uint64_t bound_ns)
{
	if (rc < 0 || l->released || too_old(age_ns, bound_ns))
		return -ENOENT;
	return strcmp(l->node, self) == 0 ? 1 : 0;
}

void shared_runs_init(struct shared_runs *rs, uint64_t bound_ns, uint64_t look_ns)
{
	memset(rs, 0, sizeof(*rs));
	rs->bound_ns = bound_ns;
	rs->look_ns = look_ns;
}

/* FNV-1a of a node's name, never 0 (0: no node seen). */
static uint64_t node_hash(const char *node)
{
	uint64_t h = 14695981039346656037ull;

	for (; *node; node++)
		h = (h ^ (unsigned char)*node) * 1099511628211ull;
	return h ? h : 1;
}

static struct shared_run *find(struct shared_runs *rs, const char *key)
{
	unsigned i;

	for (i = 0; i < SHARED_RUNS; i++)
		if (rs->r[i].state != SHARED_RUN_FREE && strcmp(rs->r[i].key, key) == 0)
			return &rs->r[i];
	return NULL;
}

/* Is @r's knowledge past its use at @now (ours or given: asked again)? */
static bool stale(const struct shared_runs *rs, const struct shared_run *r, uint64_t now)
{
	if (r->state == SHARED_RUN_OURS || r->state == SHARED_RUN_GIVEN)
		return now >= r->until_ns && !r->publishing;
	return r->state == SHARED_RUN_THEIRS && !r->looking &&
	       mcfs_since_ns(now, r->moved_ns) >= 2 * rs->bound_ns;
}

/* A slot for @key: free, else stale (a run nobody waits on). NULL if none. */
static struct shared_run *take(struct shared_runs *rs, const char *key, uint64_t now)
{
	struct shared_run *r = NULL;
	unsigned i;

	for (i = 0; i < SHARED_RUNS && !r; i++)
		if (rs->r[i].state == SHARED_RUN_FREE)
			r = &rs->r[i];
	for (i = 0; i < SHARED_RUNS && !r; i++)
		if (stale(rs, &rs->r[i], now))
			r = &rs->r[i];
	if (!r)
		return NULL;
	memset(r, 0, sizeof(*r));
	snprintf(r->key, sizeof(r->key), "%s", key);
	r->state = SHARED_RUN_ASKING;
	return r;
}

enum shared_step shared_run_step(struct shared_runs *rs, const char *key, uint64_t index,
				 uint64_t now, uint64_t *wait_ns)
{
	struct shared_run *r = find(rs, key);

	*wait_ns = 0;
	if (r && r->state != SHARED_RUN_ASKING && stale(rs, r, now)) {
		r->state = SHARED_RUN_FREE; /* forgotten: ask again */
		r = NULL;
	}
	if (!r)
		return take(rs, key, now) ? SHARED_STEP_ASK : SHARED_STEP_STORE;
	switch (r->state) {
	case SHARED_RUN_OURS:
		return SHARED_STEP_FETCH;
	case SHARED_RUN_GIVEN:
		return SHARED_STEP_STORE;
	case SHARED_RUN_THEIRS:
		if (index < SHARED_RUN_MAX && shared_bit(r->bits, index))
			return SHARED_STEP_GET;
		if (!r->looking && now >= r->look_ns) {
			r->looking = true;
			return SHARED_STEP_LOOK;
		}
		*wait_ns = r->looking ? rs->look_ns : r->look_ns - now;
		return SHARED_STEP_WAIT;
	default: /* asking */
		*wait_ns = rs->bound_ns;
		return SHARED_STEP_WAIT;
	}
}

void shared_run_claimed(struct shared_runs *rs, const char *key, int rc, uint64_t now)
{
	struct shared_run *r = find(rs, key);

	if (!r)
		return;
	memset(r->bits, 0, sizeof(r->bits));
	r->seen_node = 0;
	r->seen_modified = 0;
	r->looking = r->publishing = r->dirty = false;
	r->until_ns = now + rs->bound_ns;
	r->moved_ns = now;
	r->look_ns = now + rs->look_ns;
	if (rc == 1)
		r->state = SHARED_RUN_OURS;
	else if (rc == 0)
		r->state = SHARED_RUN_THEIRS;
	else
		r->state = SHARED_RUN_FREE; /* nobody can tell: the next miss asks again */
}

bool shared_run_looked(struct shared_runs *rs, const char *key, int rc,
		       const struct shared_lease *l, uint64_t age_ns, uint64_t now)
{
	struct shared_run *r = find(rs, key);
	bool free_ = false, hog = false;

	if (!r || r->state != SHARED_RUN_THEIRS)
		return false;
	r->looking = false;
	r->look_ns = now + rs->look_ns;
	if (rc == 0) {
		uint64_t node = node_hash(l->node);
		bool same = node == r->seen_node && memcmp(r->bits, l->bits, sizeof(r->bits)) == 0;

		/* the same holder and blocks, written again: a hog */
		hog = same && r->seen_modified > 0 && l->modified_ns > r->seen_modified;
		if (!same) {
			memcpy(r->bits, l->bits, sizeof(r->bits));
			r->moved_ns =
			    r->seen_node ? now : r->moved_ns; /* progress, or a new holder */
		}
		r->seen_node = node;
		r->seen_modified = l->modified_ns;
	}
	if (rc == -ENOENT || rc == -EINVAL)
		free_ = true;
	else if (rc == 0)
		/* saturated: another thread may have stamped progress after
		 * this one read the clock */
		free_ = hog || l->released || too_old(age_ns, rs->bound_ns) ||
			mcfs_since_ns(now, r->moved_ns) >= rs->bound_ns;
	if (free_)
		r->state = SHARED_RUN_ASKING;
	return free_;
}

bool shared_run_wrote(struct shared_runs *rs, const char *key, uint64_t index, bool ok,
		      const char *node, uint64_t now, struct shared_lease *out)
{
	struct shared_run *r = find(rs, key);

	if (!r || r->state != SHARED_RUN_OURS)
		return false;
	memset(out, 0, sizeof(*out));
	snprintf(out->node, sizeof(out->node), "%s", node);
	r->until_ns = now + rs->bound_ns;
	if (!ok) { /* given back: the waiters take it over at their next look */
		r->state = SHARED_RUN_GIVEN;
		memcpy(out->bits, r->bits, sizeof(out->bits));
		out->released = true;
		return true;
	}
	if (index >= SHARED_RUN_MAX || shared_bit(r->bits, index))
		return false; /* no new block to name */
	r->bits[index / 64] |= 1ull << (index % 64);
	if (r->publishing) {
		r->dirty = true;
		return false;
	}
	r->publishing = true;
	r->dirty = false;
	memcpy(out->bits, r->bits, sizeof(out->bits));
	return true;
}

bool shared_run_published(struct shared_runs *rs, const char *key, const char *node,
			  struct shared_lease *out)
{
	struct shared_run *r = find(rs, key);

	if (!r)
		return false;
	if (r->state == SHARED_RUN_OURS && r->dirty) {
		r->dirty = false;
		memset(out, 0, sizeof(*out));
		snprintf(out->node, sizeof(out->node), "%s", node);
		memcpy(out->bits, r->bits, sizeof(out->bits));
		return true;
	}
	r->publishing = false;
	return false;
}
