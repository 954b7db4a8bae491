/*
 * stats.c - the counter table (cache/counters.h) rendered for the mount:
 * the user.mcfs.stats text and its parser, the table's Prometheus lines, and
 * the user.mcfs.evict answer and its parser.
 *
 * Design: CACHE_COUNTERS expands once here into rows[], a constant array
 * that says for each row its key, its Prometheus family and label, its help
 * and type, and where its value sits in struct fs_stats (an offset: every
 * value is a uint64_t). Every rendering walks rows[], so a new row shows up
 * in the xattr, in `mcfs status`'s parser and in Prometheus with no other
 * edit; nothing here names a single counter.
 *
 * What it refuses to do: read a key it cannot find as 0. A missing key means
 * a daemon of another version, and a silent 0 would show a wrong status.
 */
#define _GNU_SOURCE
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_int.h"
#include "gpu.h"
#include "cache_ram.h"
#include "cache_stats.h"

struct row {
	const char *key;	      /* its user.mcfs.stats line */
	const char *prom;	      /* Prometheus family, no "mcfs_" prefix; NULL: not as is */
	const char *label;	      /* label pair of its sample, or NULL */
	const char *help;	      /* the family's HELP */
	enum cache_counter_type type; /* the family's TYPE */
	size_t off;		      /* of its uint64_t value in struct fs_stats */
	bool disk;		      /* a DISK row: exported only with a disk tier */
};

/* Where a row's value is in struct fs_stats, by its source. */
#define IN_CACHE(field) cache.field
#define IN_DISK(field) cache.disk.field
#define IN_FS(field) field
#define OFF_CACHE(field) offsetof(struct fs_stats, IN_CACHE(field))
#define OFF_DISK(field) offsetof(struct fs_stats, IN_DISK(field))
#define OFF_FS(field) offsetof(struct fs_stats, IN_FS(field))
/* value() reads 8 bytes at a row's offset: make sure that is its size. */
#define SIZE_CHECK(src, field, ...)                                                                \
	_Static_assert(sizeof(((struct fs_stats *)0)->IN_##src(field)) == sizeof(uint64_t),        \
		       "counter " #field " is not a uint64_t");
CACHE_COUNTERS(SIZE_CHECK)
#define IS_DISK_CACHE false
#define IS_DISK_DISK true
#define IS_DISK_FS false
#define ROW(src, field, key, type, prom, label, help)                                              \
	{key, prom, label, help, CACHE_##type, OFF_##src(field), IS_DISK_##src},

static const struct row rows[] = {
    /* Not a counter: the daemon's pid has opened the text since it exists. */
    {"pid", NULL, NULL, "The daemon's process id.", CACHE_GAUGE, offsetof(struct fs_stats, pid),
     false},
    CACHE_COUNTERS(ROW)};

static uint64_t value(const struct fs_stats *st, const struct row *r)
{
	uint64_t v;

	memcpy(&v, (const char *)st + r->off, sizeof(v));
	return v;
}

#define COPY_FS(src, field, ...) COPY_FS_##src(field)
#define COPY_FS_CACHE(field)
#define COPY_FS_DISK(field)
#define COPY_FS_FS(field) out->field = atomic_load_explicit(&s->field, memory_order_relaxed);

void fs_stats_get(struct fs_session *s, struct fs_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->pid = (uint64_t)getpid();
	cache_get_stats(s->cache, &out->cache);
	CACHE_COUNTERS(COPY_FS)
	if (s->gpu) { /* the GPU rows are gpu/'s state, not counted by fs/ */
		struct gpu_info gi;

		gpu_info(s->gpu, &gi);
		out->gpu_devices = gi.ok ? gi.devices : 0;
		out->gpu_ready = gi.ready;
		out->gpu_pinned_bytes = gi.pinned_bytes;
	}
}

int fs_stats_text(const struct fs_stats *st, char *buf, size_t len)
{
	size_t n = 0, i;
	int k;

	for (i = 0; i < MCFS_ARRAY_SIZE(rows); i++) {
		k = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, "%s %" PRIu64 "\n",
			     rows[i].key, value(st, &rows[i]));
		if (k < 0)
			return k;
		n += (size_t)k;
	}
	return (int)n;
}

int fs_stats_xattr(struct fs_session *s, char *buf, size_t len)
{
	struct fs_stats st;

	fs_stats_get(s, &st);
	return fs_stats_text(&st, buf, len);
}

/*
 * The value of the line "KEY VALUE" of @text into *v. Returns 0, -ENOENT
 * with no such line, -EINVAL when VALUE is not a decimal uint64_t.
 */
static int find(const char *text, const char *key, uint64_t *v)
{
	size_t klen = strlen(key);
	const char *line, *end;
	char *stop;

	for (line = text; *line; line = end + (*end == '\n')) {
		end = strchrnul(line, '\n');
		if ((size_t)(end - line) <= klen || strncmp(line, key, klen) != 0 ||
		    line[klen] != ' ')
			continue;
		line += klen + 1;
		if (*line < '0' || *line > '9')
			return -EINVAL;
		errno = 0;
		*v = strtoull(line, &stop, 10);
		return errno || stop != end ? -EINVAL : 0;
	}
	return -ENOENT;
}

int fs_stats_parse(const char *text, struct fs_stats *out, const char **key)
{
	uint64_t v;
	size_t i;
	int rc = 0, r;

	memset(out, 0, sizeof(*out));
	*key = NULL;
	for (i = 0; i < MCFS_ARRAY_SIZE(rows); i++) {
		r = find(text, rows[i].key, &v);
		if (r == 0) {
			memcpy((char *)out + rows[i].off, &v, sizeof(v));
		} else if (rc == 0) {
			rc = r;
			*key = rows[i].key;
		}
	}
	return rc;
}

static bool same_family(const struct row *a, const struct row *b)
{
	return a->prom && b->prom && strcmp(a->prom, b->prom) == 0;
}

/* Does Prometheus get row @r? Not the DISK rows when there is no disk tier. */
static bool shown(const struct row *r, bool disk)
{
	return r->prom && (disk || !r->disk);
}

/* True if row @i is the first shown row of its family in rows[]. */
static bool first_of_family(size_t i, bool disk)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (shown(&rows[j], disk) && same_family(&rows[j], &rows[i]))
			return false;
	return true;
}

void fs_stats_prom(FILE *fp, const struct fs_stats *st)
{
	bool disk = st->cache.disk_state != 0;
	const struct row *r, *f;
	size_t i, j;

	for (i = 0; i < MCFS_ARRAY_SIZE(rows); i++) {
		f = &rows[i];
		if (!shown(f, disk) || !first_of_family(i, disk))
			continue;
		fprintf(fp, "# HELP mcfs_%s %s\n# TYPE mcfs_%s %s\n", f->prom, f->help, f->prom,
			f->type == CACHE_COUNTER ? "counter" : "gauge");
		/* Within a family, the RAM tier's sample before the disk tier's,
		 * whatever the rows' order: scrapers and scripts that take the
		 * first sample of a tier family get the RAM tier, as they always
		 * did. */
		for (j = 0; j < 2 * MCFS_ARRAY_SIZE(rows); j++) {
			r = &rows[j % MCFS_ARRAY_SIZE(rows)];
			if (r->disk != (j >= MCFS_ARRAY_SIZE(rows)))
				continue;
			if (!shown(r, disk) || !same_family(r, f))
				continue;
			if (r->label)
				fprintf(fp, "mcfs_%s{%s} %" PRIu64 "\n", r->prom, r->label,
					value(st, r));
			else
				fprintf(fp, "mcfs_%s %" PRIu64 "\n", r->prom, value(st, r));
		}
	}
}

int fs_evict_text(const struct cache_evicted *ev, char *buf, size_t len)
{
	return snprintf(buf, len,
			"ram_bytes %" PRIu64 "\ndisk_bytes %" PRIu64 "\nheld_open %" PRIu64 "\n",
			ev->ram_bytes, ev->disk_bytes, ev->held_open);
}

int fs_evict_parse(const char *text, struct cache_evicted *out)
{
	int rc;

	if (find(text, "ram_bytes", &out->ram_bytes) < 0 ||
	    find(text, "disk_bytes", &out->disk_bytes) < 0)
		return -EINVAL;
	rc = find(text, "held_open", &out->held_open);
	if (rc == -ENOENT) /* an older daemon's answer */
		out->held_open = 0;
	return rc == -EINVAL ? rc : 0;
}
