/*
 * cfg.c - defaults, parsing and validation of the one config struct.
 *
 * Design: a constant table lists every key once: its type, the field it fills
 * (by offset), its bounds and a help line that doubles as the "allowed" part of
 * error messages. Parsing a value never partially updates a field: the value is
 * converted into a local, checked, then stored. A config file's lines come
 * through cfg_set() too (cfg_file.c).
 */
#define _GNU_SOURCE
#include "cfg.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KiB (1024ull)
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

enum key_type {
	KEY_SIZE,   /* uint64_t bytes, with unit suffixes */
	KEY_UINT,   /* unsigned */
	KEY_DOUBLE, /* double, seconds */
	KEY_BOOL,   /* bool: true/false, yes/no, on/off, 1/0 */
	KEY_STR,    /* char[]: any text up to the field size */
	KEY_LEVEL,  /* int: error|warning|info|debug */
};

struct key {
	const char *name;
	enum key_type type;
	size_t off;  /* offsetof(struct cfg, field) */
	size_t size; /* sizeof the field, for KEY_STR */
	double min, max;
	int (*check)(const char *value); /* extra rule for KEY_STR; 0 = ok */
	const char *allowed;		 /* shown in errors and help */
};

static int check_addressing(const char *v)
{
	return strcmp(v, "path") == 0 || strcmp(v, "virtual") == 0 ? 0 : -EINVAL;
}

static int check_symlinks(const char *v)
{
	return strcmp(v, "contained") == 0 || strcmp(v, "any") == 0 || strcmp(v, "none") == 0
		   ? 0
		   : -EINVAL;
}

static int check_unversioned(const char *v)
{
	return strcmp(v, "refuse") == 0 || strcmp(v, "trust") == 0 ? 0 : -EINVAL;
}

static int check_open_check(const char *v)
{
	return strcmp(v, "always") == 0 || strcmp(v, "ttl") == 0 ? 0 : -EINVAL;
}

static int check_log_format(const char *v)
{
	return strcmp(v, "text") == 0 || strcmp(v, "json") == 0 ? 0 : -EINVAL;
}

/* "" (off) or s3://bucket[/prefix]: the shared block cache's place. */
static int check_shared_cache(const char *v)
{
	if (v[0] == '\0')
		return 0;
	if (strncmp(v, "s3://", 5) != 0 || v[5] == '\0' || v[5] == '/')
		return -EINVAL;
	return 0;
}

static int check_disk_cache(const char *v)
{
	uint64_t bytes;
	char *end;
	double pct;

	if (v[0] == '\0')
		return 0;
	if (v[strlen(v) - 1] == '%') {
		errno = 0;
		pct = strtod(v, &end);
		if (errno || end != v + strlen(v) - 1 || !(pct > 0 && pct <= 100))
			return -EINVAL;
		return 0;
	}
	return cfg_parse_size(v, &bytes);
}

static int check_io_uring(const char *v)
{
	if (strcmp(v, "auto") == 0 || strcmp(v, "on") == 0 || strcmp(v, "off") == 0)
		return 0;
	return -EINVAL;
}

static int check_cold_whole(const char *v)
{
	if (strcmp(v, "model") == 0 || strcmp(v, "file") == 0 || strcmp(v, "off") == 0)
		return 0;
	return -EINVAL;
}

static int check_auto_off(const char *v)
{
	return strcmp(v, "auto") == 0 || strcmp(v, "off") == 0 ? 0 : -EINVAL;
}

static int check_hostport(const char *v)
{
	const char *colon = strrchr(v, ':');
	char *end;
	long port;

	if (v[0] == '\0')
		return 0;
	if (!colon || colon == v)
		return -EINVAL;
	port = strtol(colon + 1, &end, 10);
	return *end == '\0' && port > 0 && port < 65536 ? 0 : -EINVAL;
}

#define F(field) offsetof(struct cfg, field), sizeof(((struct cfg *)0)->field)

static const struct key keys[] = {
    {"block_size", KEY_SIZE, F(block_size), 1 * MiB, 64 * MiB, NULL,
     "a power of two from 1M to 64M; the unit fetched and cached"},
    {"ram_cache", KEY_SIZE, F(ram_cache), 0, 1024.0 * GiB, NULL,
     "a size of at least 4 blocks, e.g. 2G; RAM tier"},
    {"ram_prefault", KEY_BOOL, F(ram_prefault), 0, 0, NULL,
     "true or false; fault the RAM tier's memory in after start-up, in the background"},
    {"gpu_prepare", KEY_BOOL, F(gpu_prepare), 0, 0, NULL,
     "true or false; prepare every GPU at start, in the background (its context, and the "
     "pinned RAM tier mapped into it), so that no first load pays for it"},
    {"readahead_max", KEY_SIZE, F(readahead_max), 0, 64.0 * GiB, NULL,
     "a size, 0 (off) or at least one block; cap of one stream's readahead window"},
    {"prefetch_mem", KEY_SIZE, F(prefetch_mem), 0, 1024.0 * GiB, NULL,
     "a size; RAM all readahead and prefetch may hold (0 = half of ram_cache)"},
    {"connections", KEY_UINT, F(connections), 1, 256, NULL,
     "1 to 256; fetches in flight to the store"},
    {"odirect", KEY_BOOL, F(odirect), 0, 0, NULL, "true or false; posix store reads with O_DIRECT"},
    {"attr_ttl", KEY_DOUBLE, F(attr_ttl), 0, 1e9, NULL,
     "seconds, 0 or more; how long attributes and listings are trusted (stat, ls; opens: "
     "see open_check)"},
    {"negative_ttl", KEY_DOUBLE, F(negative_ttl), 0, 1e9, NULL,
     "seconds, 0 or more; how long a missing name stays missing, also in a listing"},
    {"open_check", KEY_STR, F(open_check), 0, 0, check_open_check,
     "always or ttl; always: every open confirms the file's version with the store "
     "(close-to-open); ttl: an open trusts attributes younger than attr_ttl"},
    {"read_ahead_kb", KEY_UINT, F(read_ahead_kb), 0, 1048576, NULL,
     "0 to 1048576 KiB; kernel readahead set on the mount (0 = kernel default)"},
    {"splice", KEY_BOOL, F(splice), 0, 0, NULL, "true or false; splice replies into /dev/fuse"},
    {"supervise", KEY_BOOL, F(supervise), 0, 0, NULL,
     "true or false; a supervisor process holds the mount's connection and starts a new daemon "
     "when one dies or hands over (SIGUSR2): readers only pause"},
    {"keep_cache", KEY_BOOL, F(keep_cache), 0, 0, NULL,
     "true or false; keep page cache across opens of unchanged files"},
    {"max_threads", KEY_UINT, F(max_threads), 1, 1024, NULL, "1 to 1024; FUSE worker threads"},
    {"max_request", KEY_SIZE, F(max_request), 0, 64 * MiB, NULL,
     "0 (= block_size) or 128K to 64M in whole 4K pages; largest FUSE request asked for (over "
     "1M: libfuse 3.17.2 and fs.fuse.max_pages_limit)"},
    {"io_uring", KEY_STR, F(io_uring), 0, 0, check_io_uring,
     "auto, on or off; FUSE over io_uring (libfuse 3.18; auto = when the kernel's "
     "enable_uring is Y)"},
    {"passthrough", KEY_STR, F(passthrough), 0, 0, check_auto_off,
     "auto or off; FUSE passthrough: the kernel reads complete files from their backing "
     "file in cache_dir (libfuse 3.17, root; auto = when all of it is there)"},
    {"cold_whole", KEY_STR, F(cold_whole), 0, 0, check_cold_whole,
     "model, file or off; with passthrough, an open of a file not whole in the disk tier "
     "first fetches it whole, then the kernel reads it from its file (file); model also "
     "fetches the other files of its directory with its suffix, in the background"},
    {"whole_mem", KEY_SIZE, F(whole_mem), 0, 1024.0 * GiB, NULL,
     "a size; with cold_whole, an open that waits for its file gets a copy of it in "
     "memory (a tmpfs of mcfs's own with huge pages; a memfd if not root), filled from many "
     "threads, while its file in cache_dir fills behind; at most this much at once (0 = "
     "none: it waits for its file in cache_dir)"},
    {"cold_push", KEY_BOOL, F(cold_push), 0, 0, NULL,
     "true or false; a file not complete in the cache whose reader reads on past its first "
     "block is pushed into the page cache ahead of it (FUSE_NOTIFY_STORE) by pusher threads; "
     "false = cold_direct_io decides"},
    {"push_threads", KEY_UINT, F(push_threads), 0, 64, NULL,
     "0 to 64; threads that copy pushed blocks into the page cache (cold_push; 0 = a "
     "quarter of the CPUs, 2 to 8)"},
    {"cold_direct_io", KEY_STR, F(cold_direct_io), 0, 0, check_auto_off,
     "auto or off; without cold_push, an open of a file not complete in the cache "
     "bypasses the page cache (direct_io: one copy per byte, no page allocation); auto = "
     "when the kernel lets such opens be mmapped (libfuse 3.16)"},
    {"allow_other", KEY_BOOL, F(allow_other), 0, 0, NULL,
     "true or false; let other users (pods) read the mount"},
    {"endpoint", KEY_STR, F(endpoint), 0, 0, NULL, "an http(s) URL of an S3-compatible service"},
    {"region", KEY_STR, F(region), 0, 0, NULL, "an S3 region name, e.g. us-east-1"},
    {"profile", KEY_STR, F(profile), 0, 0, NULL, "a profile in ~/.aws/credentials"},
    {"access_key", KEY_STR, F(access_key), 0, 0, NULL, "an S3 access key id"},
    {"secret_key", KEY_STR, F(secret_key), 0, 0, NULL, "an S3 secret key"},
    {"session_token", KEY_STR, F(session_token), 0, 0, NULL, "an S3 session token"},
    {"addressing", KEY_STR, F(addressing), 0, 0, check_addressing, "path or virtual"},
    {"anonymous", KEY_BOOL, F(anonymous), 0, 0, NULL, "true or false; unsigned S3 requests"},
    {"tls_verify", KEY_BOOL, F(tls_verify), 0, 0, NULL, "true or false; verify TLS certificates"},
    {"ca_file", KEY_STR, F(ca_file), 0, 0, NULL, "a PEM CA bundle path"},
    {"connect_timeout", KEY_DOUBLE, F(connect_timeout), 0.1, 3600, NULL, "seconds, 0.1 to 3600"},
    {"timeout", KEY_DOUBLE, F(timeout), 0.1, 3600, NULL,
     "seconds, 0.1 to 3600; a transfer that gets no byte for this long is retried"},
    {"stall_timeout", KEY_DOUBLE, F(stall_timeout), 0, 3600, NULL,
     "seconds, 0 to 3600 (0 = off); an answer that stops mid-way for this long is retried "
     "on a new connection"},
    {"retries", KEY_UINT, F(retries), 0, 100, NULL, "0 to 100; retries of a failed fetch"},
    {"manifest", KEY_STR, F(manifest), 0, 0, NULL,
     "a file name; the JSON listing at an http store's base"},
    {"unversioned", KEY_STR, F(unversioned), 0, 0, check_unversioned,
     "refuse or trust; an http store's file that comes with neither ETag nor Last-Modified "
     "(refuse: its reads fail, since a replacement of the same size could mix versions; "
     "trust: read it, for a store whose files never change in place)"},
    {"symlinks", KEY_STR, F(symlinks), 0, 0, check_symlinks,
     "contained, any or none; which store symlinks are shown (contained: those whose "
     "target stays inside the store)"},
    {"cache_dir", KEY_STR, F(cache_dir), 0, 0, NULL,
     "a directory for the disk tier and metadata, one subdirectory per store "
     "(empty = RAM only)"},
    {"disk_direct", KEY_BOOL, F(disk_direct), 0, 0, NULL,
     "true or false; the disk tier writes and reads its files with O_DIRECT; false: through "
     "the page cache (the kernel's dirty limits pace the writer)"},
    {"disk_writers", KEY_UINT, F(disk_writers), 0, 64, NULL,
     "0 to 64; threads that write fetched blocks to the disk tier, at most two on one "
     "file (half of them with disk_direct) (0 = half the CPUs, 2 to 8)"},
    {"disk_cache", KEY_STR, F(disk_cache), 0, 0, check_disk_cache,
     "a size (e.g. 100G) or a share of the cache filesystem (e.g. 50%)"},
    {"meta_map_size", KEY_SIZE, F(meta_map_size), 1 * MiB, 1024.0 * GiB, NULL,
     "a size, 1M to 1T; the metadata store's map in cache_dir (attributes, listings, the "
     "disk tier's index): their records keep under half of it, the older recorded "
     "attributes and listings dropped for room (raised to fit the index of a large disk "
     "tier)"},
    {"offline", KEY_BOOL, F(offline), 0, 0, NULL,
     "true or false; serve cached metadata when the store is unreachable"},
    {"shared_cache", KEY_STR, F(shared_cache), 0, 0, check_shared_cache,
     "s3://bucket[/prefix] of an S3-compatible service the cluster's nodes share: a block "
     "tier between the local tiers and the store (empty = off)"},
    {"shared_endpoint", KEY_STR, F(shared_endpoint), 0, 0, NULL,
     "an http(s) URL of the shared cache's service (empty = AWS_ENDPOINT_URL_S3, "
     "AWS_ENDPOINT_URL, else AWS)"},
    {"shared_region", KEY_STR, F(shared_region), 0, 0, NULL,
     "an S3 region name for the shared cache's signatures"},
    {"shared_profile", KEY_STR, F(shared_profile), 0, 0, NULL,
     "a profile in ~/.aws/credentials for the shared cache"},
    {"shared_access_key", KEY_STR, F(shared_access_key), 0, 0, NULL,
     "the shared cache's access key id (empty = environment or profile)"},
    {"shared_secret_key", KEY_STR, F(shared_secret_key), 0, 0, NULL,
     "the shared cache's secret key"},
    {"shared_session_token", KEY_STR, F(shared_session_token), 0, 0, NULL,
     "the shared cache's session token"},
    {"shared_addressing", KEY_STR, F(shared_addressing), 0, 0, check_addressing, "path or virtual"},
    {"shared_key_file", KEY_STR, F(shared_key_file), 0, 0, NULL,
     "a file holding the cluster's secret key (at least 32 bytes, readable by its owner "
     "only, the same on every node): blocks in the shared cache are sealed with it, and a "
     "node serves none it cannot authenticate; needed with shared_cache"},
    {"shared_timeout", KEY_DOUBLE, F(shared_timeout), 0.1, 3600, NULL,
     "seconds, 0.1 to 3600; how long the shared cache may show no progress: a request is "
     "given up (its read goes to the store) when the service does not connect, or sends no "
     "byte on it or on any other request for this long, and the cache counts as down "
     "(reads go to the store) when it does not connect or stays silent as long again; while "
     "it sends bytes on others, a request waits up to 10 times this, as does a block PUT's "
     "answer (the service stores the block first)"},
    {"shared_queue", KEY_UINT, F(shared_queue), 1, 4096, NULL,
     "1 to 4096; blocks waiting to be written to the shared cache (more are dropped, but "
     "for blocks other nodes wait for; at most a quarter of the RAM tier's slots)"},
    {"shared_wait", KEY_DOUBLE, F(shared_wait), 0, 3600, NULL,
     "seconds, 0 to 3600; how long another node's lease on a run may show no new block "
     "before a waiting node takes the run over and fetches it itself (a dead node, or one "
     "that holds and does not write); 0 = no leases: every node that misses fetches"},
    {"shared_run", KEY_SIZE, F(shared_run), 1 * MiB, 64.0 * GiB, NULL,
     "1M to 64G; the bytes of a file one lease covers (whole blocks, at least one, at most "
     "256): one node fetches a run's blocks and the others wait for them; every node of a "
     "cluster should use the same"},
    {"metrics", KEY_STR, F(metrics), 0, 0, check_hostport,
     "host:port for Prometheus metrics, e.g. 127.0.0.1:9464 (empty = off)"},
    {"log_level", KEY_LEVEL, F(log_level), 0, 0, NULL,
     "error, warning, info or debug; `mcfs log-level` changes it while mounted"},
    {"log_format", KEY_STR, F(log_format), 0, 0, check_log_format,
     "text or json; json: one object per line on stderr (time, level, pid, msg)"},
};

_Static_assert(MCFS_ARRAY_SIZE(keys) <= CFG_KEYS_MAX, "struct cfg's raw[] needs a row per key");

/* Mount options that mount(8) and fstab pass through; they mean nothing here. */
static const char *const ignored_opts[] = {
    "rw",
    "ro",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "nodiratime",
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "_netdev",
    "nofail",
    "async",
    "sync",
    "x-systemd.automount",
};

void cfg_init(struct cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->block_size = 8 * MiB; /* S3 reaches full throughput with 8 MiB parts */
	c->ram_cache = 2 * GiB;
	c->ram_prefault = true;
	c->gpu_prepare = true;
	c->readahead_max = 512 * MiB;
	c->prefetch_mem = 0;
	c->connections = 16; /* one stream caps a NAS or an object store */
	c->attr_ttl = 3600;  /* model files are immutable: trust for an hour */
	c->negative_ttl = 10;
	/* close-to-open: a file rewritten in the store is seen by the next open,
	 * after a restart too (issue 16); one stat or HEAD per open */
	snprintf(c->open_check, sizeof(c->open_check), "always");
	c->read_ahead_kb = 8192; /* large enough for 1 MiB FUSE READs, several in flight */
	c->splice = false; /* no gain at 1 MiB requests: docs/benchmarks.md, "The posix store" */
	/* The RAM tier is the cache: a cold read through the source's page cache
	 * (the model in RAM twice) ran at a fraction of O_DIRECT's speed
	 * (docs/benchmarks.md, "The posix store: O_DIRECT and splice"). */
	c->odirect = true;
	c->disk_direct = true;
	c->keep_cache = true;
	c->max_threads = 16;
	c->max_request = 0; /* the block: one FUSE READ answers from one block */
	snprintf(c->io_uring, sizeof(c->io_uring), "auto");
	snprintf(c->passthrough, sizeof(c->passthrough), "auto");
	snprintf(c->cold_direct_io, sizeof(c->cold_direct_io), "auto");
	snprintf(c->cold_whole, sizeof(c->cold_whole), "off");
	c->tls_verify = true;
	snprintf(c->region, sizeof(c->region), "us-east-1");
	snprintf(c->addressing, sizeof(c->addressing), "path");
	c->connect_timeout = 10;
	c->timeout = 30;
	/* A healthy answer never pauses this long mid-way (an 8 MiB block takes well
	 * under a second on a LAN); a stalled connection is cut and the block is
	 * fetched again on a new one, not waited on for the whole timeout. */
	c->stall_timeout = 5;
	c->retries = 5;
	snprintf(c->manifest, sizeof(c->manifest), ".mcfs-manifest.json");
	snprintf(c->symlinks, sizeof(c->symlinks), "contained");	 /* issue 16 */
	snprintf(c->unversioned, sizeof(c->unversioned), "refuse");	 /* issue 22 */
	snprintf(c->cache_dir, sizeof(c->cache_dir), "/var/cache/mcfs"); /* issue 5 */
	snprintf(c->disk_cache, sizeof(c->disk_cache), "50%%");
	/* Address space, not disk: LMDB's file grows only as pages are used. Millions
	 * of paths' records fit; a disk tier of over 8M blocks raises it (tiers.c). */
	c->meta_map_size = 8 * GiB;
	snprintf(c->shared_region, sizeof(c->shared_region), "us-east-1"); /* issue 15 */
	snprintf(c->shared_addressing, sizeof(c->shared_addressing), "path");
	/* A shared cache is a LAN away: an answer slower than this one is no win
	 * over the store, and a read must not wait long on a cache that died. */
	c->shared_timeout = 2;
	c->shared_queue = 8;
	/* Long enough for another node to fetch a block and write it (well under
	 * a second each on a LAN); short enough that a node that died holding
	 * the lease costs a reader little. */
	c->shared_wait = 10;
	c->shared_run = 256 * MiB; /* a lease's requests and pause, per 32 blocks of 8 MiB */
	c->log_level = MCFS_LOG_INFO;
	snprintf(c->log_format, sizeof(c->log_format), "text");
}

void cfg_set_source(struct cfg *c, const char *source)
{
	snprintf(c->source, sizeof(c->source), "%s", source);
	mcfs_url_redact(c->source, c->source_shown, sizeof(c->source_shown));
}

int cfg_parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *suffix;
		uint64_t mult;
	} units[] = {
	    {"", 1},	  {"b", 1},	    {"k", KiB},	       {"kb", KiB},	   {"kib", KiB},
	    {"m", MiB},	  {"mb", MiB},	    {"mib", MiB},      {"g", GiB},	   {"gb", GiB},
	    {"gib", GiB}, {"t", GiB * KiB}, {"tb", GiB * KiB}, {"tib", GiB * KiB},
	};
	unsigned long long v;
	char *end;
	size_t i;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	for (i = 0; i < MCFS_ARRAY_SIZE(units); i++) {
		if (strcasecmp(end, units[i].suffix) == 0) {
			if (v > UINT64_MAX / units[i].mult)
				return -EINVAL;
			*out = v * units[i].mult;
			return 0;
		}
	}
	return -EINVAL;
}

const char *cfg_fmt_size(uint64_t bytes, char *buf, size_t len)
{
	static const struct {
		char suffix;
		uint64_t mult;
	} units[] = {{'T', GiB * KiB}, {'G', GiB}, {'M', MiB}, {'K', KiB}};
	size_t i;

	for (i = 0; bytes != 0 && i < MCFS_ARRAY_SIZE(units); i++) {
		if (bytes % units[i].mult == 0) {
			snprintf(buf, len, "%" PRIu64 "%c", bytes / units[i].mult, units[i].suffix);
			return buf;
		}
	}
	snprintf(buf, len, "%" PRIu64, bytes);
	return buf;
}

/* @s escaped into @buf for a message (it came from a user). Returns buf. */
static const char *esc(const char *s, char *buf, size_t len)
{
	return mcfs_escape(s, strlen(s), buf, len);
}

static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_level(const char *v, int *out)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	int i;

	for (i = 0; i < (int)MCFS_ARRAY_SIZE(names); i++) {
		if (strcasecmp(v, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

static const struct key *find_key(const char *name)
{
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(keys); i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

/* The key a typo most likely meant (common/text.c's rule: at most 2 edits away), or NULL. */
static const char *nearest_key(const char *name)
{
	const char *names[MCFS_ARRAY_SIZE(keys)];
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(keys); i++)
		names[i] = keys[i].name;
	return mcfs_nearest(name, names, MCFS_ARRAY_SIZE(keys));
}

static int parse_number(const struct key *k, const char *v, double *out)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end != '\0' || !isfinite(d))
		return -EINVAL;
	if (k->type == KEY_UINT && d != floor(d))
		return -EINVAL;
	if (d < k->min || d > k->max)
		return -EINVAL;
	*out = d;
	return 0;
}

/* Converts and stores one value; -EINVAL leaves the struct untouched. */
static int store(struct cfg *c, const struct key *k, const char *v)
{
	char *field = (char *)c + k->off;
	uint64_t bytes;
	double d;
	bool b;
	int lvl;

	switch (k->type) {
	case KEY_SIZE:
		if (cfg_parse_size(v, &bytes) < 0 || (double)bytes < k->min ||
		    (double)bytes > k->max)
			return -EINVAL;
		memcpy(field, &bytes, sizeof(bytes));
		return 0;
	case KEY_UINT:
		if (parse_number(k, v, &d) < 0)
			return -EINVAL;
		*(unsigned *)(void *)field = (unsigned)d;
		return 0;
	case KEY_DOUBLE:
		if (parse_number(k, v, &d) < 0)
			return -EINVAL;
		memcpy(field, &d, sizeof(d));
		return 0;
	case KEY_BOOL:
		if (parse_bool(v, &b) < 0)
			return -EINVAL;
		memcpy(field, &b, sizeof(b));
		return 0;
	case KEY_STR:
		if (strlen(v) >= k->size || (k->check && k->check(v) < 0))
			return -EINVAL;
		memcpy(field, v, strlen(v) + 1);
		return 0;
	case KEY_LEVEL:
		if (parse_level(v, &lvl) < 0)
			return -EINVAL;
		memcpy(field, &lvl, sizeof(lvl));
		return 0;
	}
	return -EINVAL;
}

int cfg_set(struct cfg *c, const char *key, const char *value, char *err, size_t errlen)
{
	char ek[96], ev[160];
	const struct key *k;
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(ignored_opts); i++)
		if (strcmp(key, ignored_opts[i]) == 0)
			return 0;
	k = find_key(key);
	if (!k) {
		const char *near = nearest_key(key);

		esc(key, ek, sizeof(ek));
		if (near)
			snprintf(
			    err, errlen,
			    "unknown option '%s': did you mean '%s'? (`mcfs help-config` lists "
			    "the keys)",
			    ek, near);
		else
			snprintf(err, errlen,
				 "unknown option '%s' (`mcfs help-config` lists the keys)", ek);
		return -EINVAL;
	}
	if (!value)
		value = k->type == KEY_BOOL ? "true" : "";
	if (store(c, k, value) < 0) {
		/* secrets are named, never echoed */
		bool secret = strcmp(key, "secret_key") == 0 || strcmp(key, "session_token") == 0 ||
			      strcmp(key, "shared_secret_key") == 0 ||
			      strcmp(key, "shared_session_token") == 0;

		snprintf(err, errlen, "bad value for %s: '%s' (allowed: %s)", key,
			 secret ? "<hidden>" : esc(value, ev, sizeof(ev)), k->allowed);
		return -EINVAL;
	}
	if (k->type != KEY_STR)
		esc(value, c->raw[k - keys], sizeof(c->raw[0]));
	return 0;
}

int cfg_set_opts(struct cfg *c, const char *opts, char *err, size_t errlen)
{
	char *copy, *save = NULL, *tok, *eq;
	int rc = 0;

	copy = strdup(opts);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		eq = strchr(tok, '=');
		if (eq)
			*eq = '\0';
		rc = cfg_set(c, tok, eq ? eq + 1 : NULL, err, errlen);
		if (rc < 0)
			break;
	}
	free(copy);
	return rc;
}

/* A size for a message: as the user typed it, or (a default) as they would type it. */
static const char *shown(const struct cfg *c, const char *key, uint64_t v, char *buf, size_t len)
{
	const struct key *k = find_key(key);
	char typed[CFG_RAW_MAX];

	if (k && c->raw[k - keys][0] != '\0')
		snprintf(typed, sizeof(typed), "%s", c->raw[k - keys]);
	else
		cfg_fmt_size(v, typed, sizeof(typed));
	snprintf(buf, len, "'%s'", typed);
	return buf;
}

int cfg_validate(const struct cfg *c, char *err, size_t errlen)
{
	char a[CFG_RAW_MAX + 2], b[32], d[32];

	if ((c->block_size & (c->block_size - 1)) != 0) {
		snprintf(err, errlen,
			 "bad value for block_size: %s (allowed: a power of two from 1M to 64M)",
			 shown(c, "block_size", c->block_size, a, sizeof(a)));
		return -EINVAL;
	}
	if (c->ram_cache < 4 * c->block_size) {
		snprintf(err, errlen,
			 "bad value for ram_cache: %s (allowed: at least 4 blocks of block_size "
			 "%s, so %s or more)",
			 shown(c, "ram_cache", c->ram_cache, a, sizeof(a)),
			 cfg_fmt_size(c->block_size, b, sizeof(b)),
			 cfg_fmt_size(4 * c->block_size, d, sizeof(d)));
		return -EINVAL;
	}
	if (c->readahead_max != 0 && c->readahead_max < c->block_size) {
		snprintf(err, errlen,
			 "bad value for readahead_max: %s (allowed: 0, or at least block_size, %s)",
			 shown(c, "readahead_max", c->readahead_max, a, sizeof(a)),
			 cfg_fmt_size(c->block_size, b, sizeof(b)));
		return -EINVAL;
	}
	if (c->max_request != 0 && (c->max_request < 128 * KiB || c->max_request % (4 * KiB))) {
		snprintf(err, errlen,
			 "bad value for max_request: %" PRIu64
			 " (allowed: 0 or 128K to 64M in whole 4K pages)",
			 c->max_request);
		return -EINVAL;
	}
	if ((c->access_key[0] != '\0') != (c->secret_key[0] != '\0')) {
		snprintf(err, errlen, "access_key and secret_key must be given together");
		return -EINVAL;
	}
	if ((c->shared_access_key[0] != '\0') != (c->shared_secret_key[0] != '\0')) {
		snprintf(err, errlen,
			 "shared_access_key and shared_secret_key must be given together");
		return -EINVAL;
	}
	if (c->shared_cache[0] && !c->shared_key_file[0]) {
		snprintf(err, errlen,
			 "shared_cache needs shared_key_file: a file of at least 32 secret bytes "
			 "(e.g. openssl rand -hex 32), the same on every node and readable by its "
			 "owner only, that seals the cluster's blocks (deploy/README.md: who can "
			 "make a node serve what)");
		return -EINVAL;
	}
	return 0;
}

/* The value of key @k in @c, written as it would be typed. */
static const char *render(const struct cfg *c, const struct key *k, char *buf, size_t len)
{
	static const char *const levels[] = {"error", "warning", "info", "debug"};
	const char *field = (const char *)c + k->off;
	uint64_t bytes;
	unsigned u;
	double d;
	bool b;
	int lvl;

	switch (k->type) {
	case KEY_SIZE:
		memcpy(&bytes, field, sizeof(bytes));
		return cfg_fmt_size(bytes, buf, len);
	case KEY_UINT:
		memcpy(&u, field, sizeof(u));
		snprintf(buf, len, "%u", u);
		return buf;
	case KEY_DOUBLE:
		memcpy(&d, field, sizeof(d));
		snprintf(buf, len, "%g", d);
		return buf;
	case KEY_BOOL:
		memcpy(&b, field, sizeof(b));
		return b ? "true" : "false";
	case KEY_STR:
		return field[0] ? field : "(empty)";
	case KEY_LEVEL:
		memcpy(&lvl, field, sizeof(lvl));
		return lvl >= 0 && lvl < (int)MCFS_ARRAY_SIZE(levels) ? levels[lvl] : "?";
	}
	return "?";
}

void cfg_print_keys(void *fp)
{
	char buf[CFG_STR_MAX];
	int width = 7, kwidth = 16; /* "default"; the longest key, at least */
	struct cfg d;
	size_t i;

	cfg_init(&d);
	for (i = 0; i < MCFS_ARRAY_SIZE(keys); i++) {
		width = MCFS_MAX(width, (int)strlen(render(&d, &keys[i], buf, sizeof(buf))));
		kwidth = MCFS_MAX(kwidth, (int)strlen(keys[i].name));
	}
	fprintf(fp, "Sizes take K, M, G or T: binary units (1M = 1 MiB = 1048576 bytes).\n"
		    "Times are in seconds. A config file (-c) may hold up to 1 MiB.\n\n");
	fprintf(fp, "  %-*s %-*s %s\n", kwidth, "key", width, "default", "allowed; what it does");
	for (i = 0; i < MCFS_ARRAY_SIZE(keys); i++)
		fprintf(fp, "  %-*s %-*s %s\n", kwidth, keys[i].name, width,
			render(&d, &keys[i], buf, sizeof(buf)), keys[i].allowed);
}
