/*
 * shared_lease_test.c - unit test of the shared tier's decisions
 * (shared_lease.c), driven by a fake clock and a fake service: one S3
 * bucket holding one run's lease object, whose Date and Last-Modified come
 * from the fake clock. Nodes are a struct shared_runs each; their requests
 * are made here, in the order each test picks, so races are exact.
 *
 * Covered: two nodes racing for one run (with and without a conditional
 * PUT), this node's threads asking once, waiters GETting each block once it
 * is written, a dead holder's run taken over after the bound and not before,
 * a hog (a holder that rewrites its lease and writes no block) losing its run
 * at the look that sees it rewritten, a read-only bucket (the run given back, the health state
 * read-only without flapping), a down service probed once per retry, the
 * sorting of failed requests, and the lease's format. Exits 0 (pass) or 1.
 */
#include "mcfs.h"
#include "mcfs_test.h"
#include "shared_lease.h"

#include <errno.h>
#include <string.h>

#define MS 1000000ull
#define S 1000000000ull
#define BOUND (10 * S)
#define LOOK (250 * MS)
#define RUN "mcfs2/store/model.bin-0123/8M-0-run32.lease"

static uint64_t now_ns = 1000 * S; /* the fake clock: the nodes' and the service's */

/* The fake service: one lease object, and whether it takes If-None-Match: *. */
struct service {
	bool has;
	char body[SHARED_LEASE_MAX];
	size_t n;
	uint64_t modified_ns;
	bool conditional;
};

/* GET of the lease: rc, the lease, its age by the service's clock (to the second). */
static int svc_get(const struct service *s, struct shared_lease *l, uint64_t *age)
{
	int rc;

	*age = UINT64_MAX;
	memset(l, 0, sizeof(*l));
	if (!s->has)
		return -ENOENT;

	*age = shared_lease_age((int64_t)(now_ns / S * S), (int64_t)(s->modified_ns / S * S));
	rc = shared_lease_parse(s->body, s->n, l);
	l->modified_ns = (int64_t)(s->modified_ns / S * S); /* to the second, as S3 says it */
	return rc;
}

/* PUT of @l; with @if_none_match, -ESTALE (412) when one exists. */
static int svc_put(struct service *s, const struct shared_lease *l, bool if_none_match)
{
	if (if_none_match && s->has)
		return -ESTALE;
	s->n = shared_lease_format(l, s->body);
	s->has = true;
	s->modified_ns = now_ns;
	return 0;
}

struct node {
	const char *name;
	struct shared_runs rs;
};

static void node_init(struct node *n, const char *name)
{
	n->name = name;
	shared_runs_init(&n->rs, BOUND, LOOK);
}

static struct shared_lease lease_of(const char *node)
{
	struct shared_lease l;

	memset(&l, 0, sizeof(l));
	snprintf(l.node, sizeof(l.node), "%s", node);
	return l;
}

/* A claim's first half, as shared.c makes it: read; held: the answer (1 or 0); free: -ENOENT. */
static int claim_read(struct node *n, struct service *s)
{
	struct shared_lease l;
	uint64_t age;
	int rc = svc_get(s, &l, &age);

	return shared_lease_holder(rc, &l, age, n->name, BOUND);
}

/* Its second half: our lease written (conditionally if @absent and the
 * service takes it); the read-back decides unless the conditional PUT did. */
static int claim_write(struct node *n, struct service *s, bool absent)
{
	struct shared_lease l = lease_of(n->name);

	if (absent && s->conditional)
		return svc_put(s, &l, true) == 0 ? 1 : 0;
	return svc_put(s, &l, false) == 0 ? 2 : -EIO; /* 2: read it back */
}

static int claim_back(struct node *n, struct service *s)
{
	int rc = claim_read(n, s);

	return rc == -ENOENT ? 1 : rc;
}

/* A whole claim by @n with nobody in between. */
static int claim(struct node *n, struct service *s)
{
	int rc = claim_read(n, s);

	if (rc >= 0)
		return rc;
	rc = claim_write(n, s, !s->has);
	return rc == 2 ? claim_back(n, s) : rc;
}

static enum shared_step step(struct node *n, uint64_t index)
{
	uint64_t wait;

	return shared_run_step(&n->rs, RUN, index, now_ns, &wait);
}

/* @holder wrote block @index: its lease written with it (as shared.c's writer does). */
static void wrote(struct node *holder, struct service *s, uint64_t index, bool ok)
{
	struct shared_lease l;

	if (!shared_run_wrote(&holder->rs, RUN, index, ok, holder->name, now_ns, &l))
		return;
	do
		(void)svc_put(s, &l, false);
	while (shared_run_published(&holder->rs, RUN, holder->name, &l));
}

/* @n looks at the lease: true when it takes the run over (and claims it). */
static bool look(struct node *n, struct service *s)
{
	struct shared_lease l;
	uint64_t age;
	int rc = svc_get(s, &l, &age);

	if (!shared_run_looked(&n->rs, RUN, rc, &l, age, now_ns))
		return false;
	/* taken over: our lease written over the stalled one, then read back */
	rc = claim_write(n, s, false);
	shared_run_claimed(&n->rs, RUN, rc == 2 ? claim_back(n, s) : rc, now_ns);
	return true;
}

/* Two nodes miss block 0 at once; their requests interleave. One fetches. */
static void test_race(bool conditional)
{
	struct service s = {.conditional = conditional};
	struct node a, b;
	int ra, rb;

	node_init(&a, "a");
	node_init(&b, "b");
	CHECK(step(&a, 0) == SHARED_STEP_ASK && step(&b, 0) == SHARED_STEP_ASK);
	/* both read: no lease; both write; then both read back */
	CHECK(claim_read(&a, &s) == -ENOENT && claim_read(&b, &s) == -ENOENT);
	ra = claim_write(&a, &s, true);
	now_ns += 5 * MS;
	rb = claim_write(&b, &s, true);
	if (ra == 2)
		ra = claim_back(&a, &s);
	if (rb == 2)
		rb = claim_back(&b, &s);
	CHECK(ra + rb == 1 && ra >= 0 && rb >= 0, "conditional %d: a %d, b %d", conditional, ra,
	      rb);
	/* with a conditional PUT, the first writer wins; without, the last */
	CHECK(conditional ? ra == 1 : rb == 1, "conditional %d: a %d, b %d", conditional, ra, rb);
	shared_run_claimed(&a.rs, RUN, ra, now_ns);
	shared_run_claimed(&b.rs, RUN, rb, now_ns);
	CHECK((step(&a, 1) == SHARED_STEP_FETCH) == (ra == 1));
	CHECK((step(&b, 1) == SHARED_STEP_FETCH) == (rb == 1));
	/* a third node, later: the run is held, it waits */
	{
		struct node c;

		node_init(&c, "c");
		CHECK(step(&c, 0) == SHARED_STEP_ASK && claim(&c, &s) == 0, "a third node claimed");
	}
}

/* This node's threads: the first miss asks, the others wait for its answer, once. */
static void test_one_asks(void)
{
	struct node a;
	uint64_t wait;

	node_init(&a, "a");
	CHECK(shared_run_step(&a.rs, RUN, 0, now_ns, &wait) == SHARED_STEP_ASK);
	CHECK(shared_run_step(&a.rs, RUN, 1, now_ns, &wait) == SHARED_STEP_WAIT && wait > 0);
	CHECK(shared_run_step(&a.rs, RUN, 2, now_ns, &wait) == SHARED_STEP_WAIT);
	shared_run_claimed(&a.rs, RUN, 1, now_ns);
	CHECK(step(&a, 1) == SHARED_STEP_FETCH && step(&a, 2) == SHARED_STEP_FETCH);
	/* nobody could tell (the service failed): the next miss asks again */
	node_init(&a, "a");
	CHECK(step(&a, 0) == SHARED_STEP_ASK);
	shared_run_claimed(&a.rs, RUN, -EIO, now_ns);
	CHECK(step(&a, 1) == SHARED_STEP_ASK);
}

/* A waiter GETs each block once the holder's lease says it is written; not before. */
static void test_waiters_get_written_blocks(void)
{
	struct service s = {0};
	struct node a, b;
	uint64_t wait;

	node_init(&a, "a");
	node_init(&b, "b");
	CHECK(step(&a, 0) == SHARED_STEP_ASK);
	shared_run_claimed(&a.rs, RUN, claim(&a, &s), now_ns);
	CHECK(step(&b, 0) == SHARED_STEP_ASK);
	shared_run_claimed(&b.rs, RUN, claim(&b, &s), now_ns);
	CHECK(step(&b, 0) == SHARED_STEP_WAIT, "asked before the first look");
	now_ns += LOOK;
	CHECK(step(&b, 0) == SHARED_STEP_LOOK);
	CHECK(shared_run_step(&b.rs, RUN, 1, now_ns, &wait) == SHARED_STEP_WAIT, "two lookers");
	CHECK(!look(&b, &s), "a fresh lease taken over");
	wrote(&a, &s, 0, true);
	wrote(&a, &s, 2, true);
	CHECK(step(&b, 0) == SHARED_STEP_WAIT, "a GET before the lease said so");
	now_ns += LOOK;
	CHECK(step(&b, 0) == SHARED_STEP_LOOK && !look(&b, &s));
	CHECK(step(&b, 0) == SHARED_STEP_GET && step(&b, 2) == SHARED_STEP_GET);
	CHECK(step(&b, 1) == SHARED_STEP_WAIT, "block 1 is not written");
	/* block 0 written again (over a refused copy): no new bit, the lease not
	 * written again, so not taken for a hog's */
	now_ns += S + LOOK;
	wrote(&a, &s, 0, true);
	CHECK(step(&b, 1) == SHARED_STEP_LOOK && !look(&b, &s), "a holder taken for a hog");
	/* a lease write in flight: the next write is carried by it, not sent apart */
	{
		struct shared_lease l;

		CHECK(shared_run_wrote(&a.rs, RUN, 3, true, "a", now_ns, &l));
		CHECK(!shared_run_wrote(&a.rs, RUN, 4, true, "a", now_ns, &l));
		CHECK(shared_run_published(&a.rs, RUN, "a", &l) && shared_bit(l.bits, 4));
		CHECK(!shared_run_published(&a.rs, RUN, "a", &l));
	}
}

/* A holder that dies: its run is taken over once its lease shows no progress
 * for the bound; not a look earlier. */
static void test_dead_node(void)
{
	struct service s = {0};
	struct node a, b;
	uint64_t t0;
	bool took = false;

	node_init(&a, "a");
	node_init(&b, "b");
	(void)step(&a, 0);
	shared_run_claimed(&a.rs, RUN, claim(&a, &s), now_ns);
	wrote(&a, &s, 0, true); /* then a dies */
	(void)step(&b, 1);
	shared_run_claimed(&b.rs, RUN, claim(&b, &s), now_ns);
	t0 = now_ns;
	while (!took && now_ns - t0 < 3 * BOUND) {
		now_ns += LOOK;
		if (step(&b, 1) == SHARED_STEP_LOOK)
			took = look(&b, &s);
	}
	CHECK(took && now_ns - t0 >= BOUND && now_ns - t0 <= BOUND + LOOK,
	      "taken over after %llu ms", (unsigned long long)((now_ns - t0) / MS));
	CHECK(step(&b, 1) == SHARED_STEP_FETCH && step(&b, 5) == SHARED_STEP_FETCH);
	/* a lease left by a node dead long ago (older than the bound by the
	 * service's clock): taken at once */
	now_ns += 3 * BOUND;
	node_init(&a, "c");
	CHECK(step(&a, 0) == SHARED_STEP_ASK && claim(&a, &s) == 1, "an expired lease held");
}

/* A hog writes its lease again (the service's clock sees it new) with no new
 * block: it loses the run at the first look that sees it written again (a
 * holder writes its lease only with a new block), once per run, not per
 * block; a hog slower to write it than the bound, at the bound. */
static void test_hog(void)
{
	static const uint64_t every[] = {LOOK, 3 * S, 2 * BOUND};
	struct service s = {0};
	struct node hog, b;
	struct shared_lease l = lease_of("hog");
	uint64_t t0, last;
	unsigned i;
	bool took;

	for (i = 0; i < sizeof(every) / sizeof(every[0]); i++) {
		node_init(&b, "b");
		(void)svc_put(&s, &l, false);
		CHECK(step(&b, 0) == SHARED_STEP_ASK && claim(&b, &s) == 0,
		      "the hog's run claimed");
		shared_run_claimed(&b.rs, RUN, 0, now_ns);
		t0 = last = now_ns;
		took = false;
		while (!took && now_ns - t0 < 5 * BOUND) {
			now_ns += LOOK;
			if (now_ns - last >= every[i]) { /* the hog keeps it fresh */
				(void)svc_put(&s, &l, false);
				last = now_ns;
			}
			if (step(&b, 0) == SHARED_STEP_LOOK)
				took = look(&b, &s);
		}
		/* seen written again a second later by the service's clock, or the bound */
		CHECK(took && now_ns - t0 <= MCFS_MIN(every[i] + S + 2 * LOOK, BOUND + LOOK),
		      "a hog writing every %llu ms kept its run %llu ms",
		      (unsigned long long)(every[i] / MS),
		      (unsigned long long)((now_ns - t0) / MS));
		/* the rest of the run is b's at once: no second wait */
		CHECK(step(&b, 1) == SHARED_STEP_FETCH && step(&b, 31) == SHARED_STEP_FETCH);
		now_ns += 2 * BOUND;
	}
	/* and a holder that writes blocks keeps its run however long it takes */
	node_init(&hog, "slow");
	node_init(&b, "b");
	memset(&s, 0, sizeof(s));
	(void)step(&hog, 0);
	shared_run_claimed(&hog.rs, RUN, claim(&hog, &s), now_ns);
	(void)step(&b, 31);
	shared_run_claimed(&b.rs, RUN, claim(&b, &s), now_ns);
	for (t0 = 0; t0 < 31; t0++) {
		now_ns += BOUND / 2;
		wrote(&hog, &s, t0, true);
		if (step(&b, 31) == SHARED_STEP_LOOK)
			CHECK(!look(&b, &s), "a progressing holder lost its run at block %llu",
			      (unsigned long long)t0);
	}
}

/* A read-only bucket: writes refused, reads served; the state goes read-only
 * once, probes once per retry, and a block found written is no answer. The
 * holder whose write fails gives its run back: waiters take it at their look. */
static void test_read_only_bucket(void)
{
	struct shared_health h;
	struct service s = {0};
	struct node a, b;
	enum shared_ticket t;
	int changes = 0, i;

	shared_health_init(&h, now_ns);
	t = shared_health_ask(&h, SHARED_OP_WRITE, now_ns);
	changes += shared_health_tell(&h, t, SHARED_OP_WRITE,
				      shared_outcome(SHARED_OP_WRITE, -EACCES, 403, 0, 0, 0, 0, S),
				      now_ns);
	CHECK(h.state == SHARED_READ_ONLY && changes == 1);
	/* in flight when it changed: changes nothing, is not logged again */
	changes += shared_health_tell(&h, SHARED_T_GO, SHARED_OP_WRITE, SHARED_O_REFUSED, now_ns);
	CHECK(shared_health_ask(&h, SHARED_OP_READ, now_ns) == SHARED_T_GO, "reads refused");
	CHECK(shared_health_ask(&h, SHARED_OP_WRITE, now_ns) == SHARED_T_NONE, "a write sent");
	for (i = 0; i < 4; i++) {
		now_ns += SHARED_RETRY_NS;
		t = shared_health_ask(&h, SHARED_OP_WRITE, now_ns);
		CHECK(t == SHARED_T_PROBE &&
		      shared_health_ask(&h, SHARED_OP_WRITE, now_ns) == SHARED_T_NONE);
		/* one probe finds its block written (a HEAD): no answer; the next is refused */
		changes += shared_health_tell(&h, t, SHARED_OP_WRITE,
					      i == 0 ? SHARED_O_BUSY : SHARED_O_REFUSED, now_ns);
	}
	CHECK(h.state == SHARED_READ_ONLY && changes == 1, "flapped: %d changes", changes);
	now_ns += SHARED_RETRY_NS;
	t = shared_health_ask(&h, SHARED_OP_WRITE, now_ns);
	CHECK(shared_health_tell(&h, t, SHARED_OP_WRITE, SHARED_O_OK, now_ns) &&
	      h.state == SHARED_UP);

	/* the holder's block write refused: the run given back, taken over at the next look */
	node_init(&a, "a");
	node_init(&b, "b");
	(void)step(&a, 0);
	shared_run_claimed(&a.rs, RUN, claim(&a, &s), now_ns);
	(void)step(&b, 0);
	shared_run_claimed(&b.rs, RUN, claim(&b, &s), now_ns);
	wrote(&a, &s, 0, false);
	wrote(&a, &s, 1, false); /* given back once */
	CHECK(step(&a, 2) == SHARED_STEP_STORE, "a run given back still fetched as ours");
	now_ns += LOOK;
	CHECK(step(&b, 0) == SHARED_STEP_LOOK && look(&b, &s), "a given-back run waited on");
	CHECK(step(&b, 0) == SHARED_STEP_FETCH);
}

/* A down service: reads probe it once per retry; in-flight failures say nothing. */
static void test_down(void)
{
	struct shared_health h;
	enum shared_ticket t;

	shared_health_init(&h, now_ns);
	CHECK(shared_health_tell(&h, SHARED_T_GO, SHARED_OP_READ, SHARED_O_DOWN, now_ns));
	CHECK(!shared_health_tell(&h, SHARED_T_GO, SHARED_OP_READ, SHARED_O_DOWN, now_ns),
	      "down twice");
	CHECK(shared_health_ask(&h, SHARED_OP_READ, now_ns) == SHARED_T_NONE);
	CHECK(shared_health_ask(&h, SHARED_OP_WRITE, now_ns + SHARED_RETRY_NS) == SHARED_T_NONE,
	      "a write probed a down service");
	now_ns += SHARED_RETRY_NS;
	t = shared_health_ask(&h, SHARED_OP_READ, now_ns);
	CHECK(t == SHARED_T_PROBE &&
	      shared_health_ask(&h, SHARED_OP_READ, now_ns) == SHARED_T_NONE);
	CHECK(!shared_health_tell(&h, t, SHARED_OP_READ, SHARED_O_DOWN, now_ns) &&
	      h.state == SHARED_DOWN);
	CHECK(shared_health_ask(&h, SHARED_OP_READ, now_ns + SHARED_RETRY_NS - 1) == SHARED_T_NONE);
	now_ns += SHARED_RETRY_NS;
	t = shared_health_ask(&h, SHARED_OP_READ, now_ns);
	CHECK(shared_health_tell(&h, t, SHARED_OP_READ, SHARED_O_OK, now_ns) &&
	      h.state == SHARED_UP);
}

/* Failures sorted: a busy service is not down; silence is, after twice the timeout. */
static void test_outcomes(void)
{
	CHECK(shared_outcome(SHARED_OP_READ, -ENOENT, 404, 0, 0, 0, 0, S) == SHARED_O_OK);
	CHECK(shared_outcome(SHARED_OP_READ, -EIO, 0, 1, 0, 0, 0, S) == SHARED_O_BUSY);
	CHECK(shared_outcome(SHARED_OP_READ, -EIO, 0, 0, 1, 0, S, S) == SHARED_O_BUSY);
	CHECK(shared_outcome(SHARED_OP_READ, -EIO, 200, 0, 1, 0, 2 * S, S) == SHARED_O_DOWN);
	CHECK(shared_outcome(SHARED_OP_WRITE, -EIO, 0, 0, 0, 1, 0, S) == SHARED_O_BUSY);
	CHECK(shared_outcome(SHARED_OP_READ, -EIO, 0, 0, 0, 0, 0, S) == SHARED_O_DOWN);
	CHECK(shared_outcome(SHARED_OP_WRITE, -EIO, 503, 0, 0, 0, 0, S) == SHARED_O_DOWN);
	CHECK(shared_outcome(SHARED_OP_WRITE, -EIO, 507, 0, 0, 0, 0, S) == SHARED_O_REFUSED);
	CHECK(shared_outcome(SHARED_OP_WRITE, -EACCES, 403, 0, 0, 0, 0, S) == SHARED_O_REFUSED);
	CHECK(shared_outcome(SHARED_OP_READ, -EACCES, 403, 0, 0, 0, 0, S) == SHARED_O_DOWN);
}

/* The lease's body both ways; what is not a lease is nobody's. */
static void test_format(void)
{
	struct shared_lease l = lease_of("host-0123456789abcdef"), m;
	char body[SHARED_LEASE_MAX];
	size_t n;

	n = shared_lease_format(&l, body);
	CHECK(strcmp(body, "host-0123456789abcdef 0\n") == 0, "'%s'", body);
	l.bits[0] = 1 | 1ull << 63;
	l.bits[1] = 1;
	l.bits[3] = 1ull << 63;
	l.released = true;
	n = shared_lease_format(&l, body);
	CHECK(shared_lease_parse(body, n, &m) == 0 && memcmp(&l, &m, sizeof(l)) == 0, "'%s'", body);
	CHECK(shared_lease_parse("x 12 held\n", 10, &m) == -EINVAL);
	CHECK(shared_lease_parse("x zz\n", 5, &m) == -EINVAL);
	CHECK(shared_lease_parse("\n", 1, &m) == -EINVAL);
	CHECK(shared_lease_age(0, 5) == UINT64_MAX && shared_lease_age(5 * S, 2 * S) == 3 * S);
}

/* Two threads of one node look at a progressing run: one reads the clock,
 * then the other looks, sees progress and stamps the run later than the
 * first one's clock. The first one's look sees no silence (the elapsed time
 * was "now - moved", which wrapped to 584 years: the run was taken over). */
static void test_clock_read_before_a_stamp(void)
{
	struct service s = {0};
	struct node a, b;
	struct shared_lease l;
	uint64_t age, early;
	int rc;

	node_init(&a, "a");
	node_init(&b, "b");
	CHECK(step(&a, 0) == SHARED_STEP_ASK);
	shared_run_claimed(&a.rs, RUN, claim(&a, &s), now_ns);
	wrote(&a, &s, 0, true);
	CHECK(step(&b, 1) == SHARED_STEP_ASK);
	shared_run_claimed(&b.rs, RUN, claim(&b, &s), now_ns);
	now_ns += LOOK;
	CHECK(!look(&b, &s), "a fresh holder taken over");
	now_ns += 2 * S;
	wrote(&a, &s, 1, true);
	early = now_ns;	  /* thread 1 reads the clock */
	now_ns += 1 * MS; /* thread 2 looks a moment later: progress */
	CHECK(!look(&b, &s), "a progressing holder taken over");
	rc = svc_get(&s, &l, &age);
	CHECK(!shared_run_looked(&b.rs, RUN, rc, &l, age, early),
	      "a run stamped after this thread read the clock looked silent");
	CHECK(step(&b, 0) == SHARED_STEP_GET, "the run was lost");
}

int main(void)
{
	test_race(false);
	test_race(true);
	test_one_asks();
	test_waiters_get_written_blocks();
	test_dead_node();
	test_hog();
	test_clock_read_before_a_stamp();
	test_read_only_bucket();
	test_down();
	test_outcomes();
	test_format();
	if (failures) {
		fprintf(stderr, "shared_lease_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
