/*
 * cfg.h - the one configuration struct and how it is filled.
 *
 * Order: cfg_init() sets defaults, cfg_load_file() applies a config file (INI,
 * parsed by libinih), cfg_set()/cfg_set_opts() apply `-o key=value,...`, and
 * cfg_validate() checks the whole struct once. Every key lives in one table in
 * cfg.c with its type, bounds and help text, so the config file, -o, the
 * documentation (`mcfs help-config`) and the error messages cannot disagree.
 *
 * Errors are returned as -EINVAL with a message in the caller's buffer that
 * names the key, the value and what is allowed. Nothing here logs.
 */
#ifndef MCFS_CFG_H
#define MCFS_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcfs.h"

#define CFG_STR_MAX 1024
#define CFG_ERR_MAX 512
#define CFG_KEYS_MAX 64 /* keys in cfg.c's table, at most (checked there) */
#define CFG_RAW_MAX 32	/* bytes kept of the text a value was typed as */

struct cfg {
	/* Set from the command line, not keys. */
	char source[CFG_STR_MAX];	/* store URL or directory, as given */
	char source_shown[CFG_STR_MAX]; /* less any user:pass@: logs, fsname, cache names */
	char mountpoint[CFG_STR_MAX];	/* absolute path once validated */
	bool foreground;		/* -f: stay in the foreground, log to stderr */
	bool fuse_debug;		/* -d: libfuse's request trace */

	/* Block cache. */
	uint64_t block_size;	/* bytes, power of two, 1..64 MiB: unit fetched and cached */
	uint64_t ram_cache;	/* bytes of RAM-tier slots (rounded down to blocks) */
	bool ram_prefault;	/* fault the RAM tier in after start-up, in the background */
	bool gpu_prepare;	/* prepare every GPU at start: context, RAM tier mapped */
	uint64_t readahead_max; /* bytes: cap of one stream's readahead window */
	uint64_t prefetch_mem;	/* bytes: all streams' prefetch in flight, global budget */
	unsigned connections;	/* parallel fetches to the store */
	bool odirect;		/* posix store: read with O_DIRECT */

	/* Metadata. */
	double attr_ttl;     /* seconds an attribute or listing is trusted */
	double negative_ttl; /* seconds a "no such file" answer is trusted */
	char open_check[8];  /* "always": an open confirms the version with the store; "ttl" */

	/* Kernel / FUSE. */
	unsigned read_ahead_kb; /* written to the mount's bdi after mounting; 0 = leave */
	bool splice;		/* splice replies into /dev/fuse */
	bool supervise;		/* a supervisor holds the mount across restarts (fs/handover.h) */
	bool keep_cache;	/* FOPEN_KEEP_CACHE for files unchanged since last open */
	unsigned max_threads;	/* FUSE worker threads */
	uint64_t max_request;	/* bytes, largest FUSE request to ask for; 0 = block_size */
	char io_uring[8];	/* "auto", "on" or "off": FUSE over io_uring */
	char passthrough[8];	/* "auto" or "off": FUSE passthrough of complete files */
	char cold_direct_io[8]; /* "auto" or "off": direct_io for opens of files not complete */
	char cold_whole[8];	/* "model", "file" or "off": a cold open fetches the file whole */
	uint64_t whole_mem;	/* bytes: cold_whole=model's copies in memory at once (0 = none) */
	bool cold_push;		/* push cold files into the page cache ahead of their reader */
	unsigned push_threads;	/* pusher threads (0: from the CPU count) */
	bool disk_direct; /* the disk tier's files with O_DIRECT (else through the page cache) */
	unsigned disk_writers; /* threads writing the disk tier's blocks (0: from the CPU count) */
	bool allow_other;      /* let other users see the mount */

	/* Remote stores (cache/remote). */
	char endpoint[CFG_STR_MAX]; /* S3 endpoint URL; empty = AWS for the region */
	char region[64];	    /* S3 region for SigV4 */
	char profile[128];	    /* ~/.aws/credentials profile */
	char access_key[256];	    /* S3 key; empty = environment or profile */
	char secret_key[256];	    /* never logged */
	char session_token[2048];   /* never logged */
	char addressing[16];	    /* "path" or "virtual" */
	bool anonymous;		    /* unsigned S3 requests */
	bool tls_verify;	    /* verify server certificates */
	char ca_file[CFG_STR_MAX];  /* extra CA bundle; empty = system */
	double connect_timeout;	    /* seconds */
	double timeout;		    /* seconds without progress before a transfer is retried */
	double stall_timeout;	    /* seconds without a byte, once an answer began; 0 = off */
	unsigned retries;	    /* attempts after the first, on retryable errors */
	char manifest[256];	    /* http: manifest file name at the base URL */
	char unversioned[8];	    /* http: "refuse" or "trust" a file with no validator */
	char symlinks[16];	    /* "contained", "any" or "none": store symlinks shown */

	/* Disk tier and persistent metadata (cache/disk, cache/meta). */
	char cache_dir[CFG_STR_MAX]; /* default /var/cache/mcfs; empty = no disk tier */
	char disk_cache[32];	     /* "SIZE" or "N%" of the filesystem */
	uint64_t meta_map_size;	     /* bytes: LMDB's map (attributes, listings, block index) */
	bool offline;		     /* answer metadata from LMDB when the store is down */

	/* Shared block cache (cache/shared.c): a tier on an S3 bucket that the
	 * nodes of a cluster share, between the local tiers and the store. */
	char shared_cache[CFG_STR_MAX];	   /* s3://bucket[/prefix]; empty = off */
	char shared_endpoint[CFG_STR_MAX]; /* its service's URL; empty = AWS_ENDPOINT_URL(_S3) */
	char shared_region[64];		   /* for SigV4 */
	char shared_profile[128];	   /* ~/.aws/credentials profile */
	char shared_access_key[256];	   /* empty = environment or profile */
	char shared_secret_key[256];	   /* never logged */
	char shared_session_token[2048];   /* never logged */
	char shared_addressing[16];	   /* "path" or "virtual" */
	char shared_key_file[CFG_STR_MAX]; /* the cluster's key, which seals blocks; needed */
	double shared_timeout;		   /* seconds the shared cache may show no progress */
	unsigned shared_queue;		   /* blocks queued for PUT (each pins a RAM slot) */
	double shared_wait;		   /* seconds to wait for another node's fetch; 0 = off */
	uint64_t shared_run;		   /* bytes of a file one lease covers */

	/* Operations. */
	char metrics[128];  /* host:port for Prometheus text; empty = off */
	int log_level;	    /* MCFS_LOG_* */
	char log_format[8]; /* "text" or "json": the shape of lines on stderr */

	/*
	 * What the user typed for each number, size, bool or level key (-o or
	 * the file, the one in force), escaped and cut to fit, so that a message
	 * about a value shows "3M" and not 3145728. "" = the default. Indexed
	 * like cfg.c's key table; strings (secrets among them) are not kept.
	 */
	char raw[CFG_KEYS_MAX][CFG_RAW_MAX];
};

/* Fills @c with the defaults. Can't fail. */
void cfg_init(struct cfg *c);

/* Sets c->source to @source (truncated) and c->source_shown to it less any user:pass@. */
void cfg_set_source(struct cfg *c, const char *source);

/*
 * Sets one key from its text form. Returns 0, or -EINVAL with a message in
 * err (naming key, value and what is allowed); @c is unchanged on error.
 * Standard mount options (rw, ro, nodev, nosuid, ...) are accepted and ignored.
 */
MCFS_MUST_CHECK int cfg_set(struct cfg *c, const char *key, const char *value, char *err,
			    size_t errlen);

/* Applies "k=v,k2,k3=v3" (a bare key means "=true"). Stops at the first error. */
MCFS_MUST_CHECK int cfg_set_opts(struct cfg *c, const char *opts, char *err, size_t errlen);

/* The largest config file read, in bytes: a real one is a few hundred. */
#define CFG_FILE_MAX (1024 * 1024)

/*
 * Applies an INI file: keys at top level or in [mcfs]. Returns 0, -ENOENT (or
 * another errno) if the file can't be read, or -EINVAL naming file, line, key.
 * A NUL byte anywhere is refused (-EINVAL, naming the line and the key whose
 * value holds it): the parser would end the value there and drop the rest.
 * A file over CFG_FILE_MAX bytes is refused whole (-EINVAL, naming the file,
 * its size and the limit), none of it applied.
 */
MCFS_MUST_CHECK int cfg_load_file(struct cfg *c, const char *path, char *err, size_t errlen);

/* Checks relations between keys. Returns 0 or -EINVAL with a message. */
MCFS_MUST_CHECK int cfg_validate(const struct cfg *c, char *err, size_t errlen);

/*
 * Parses "8M", "8MiB", "1g", "4096" into bytes. Returns 0 or -EINVAL.
 * Binary units (k = 1024).
 */
MCFS_MUST_CHECK int cfg_parse_size(const char *s, uint64_t *out);

/*
 * Writes @bytes the way a user would type it: "8M", "2G", "1536K", "100" (the
 * largest binary unit that divides it exactly). Returns buf. Can't fail.
 */
const char *cfg_fmt_size(uint64_t bytes, char *buf, size_t len);

/* Writes every key with its default and what it allows to @fp (`mcfs help-config`). */
void cfg_print_keys(void *fp);

#endif
